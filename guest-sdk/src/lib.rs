//! Write a [cairn](https://example.invalid/cairn) controller in Rust.
//!
//! A controller is one type implementing [`Controller`] and one
//! [`controller!`] line. Build it with `cargo build --target wasm32-wasip2`
//! (crate type `cdylib`) and run it with `cairn run path/to/it.wasm`.
//!
//! ```no_run
//! use cairn_guest::{Controller, Error, Outcome, Start};
//!
//! struct Echo;
//!
//! impl Controller for Echo {
//!     fn run(start: Start) -> Result<Outcome, Error> {
//!         for word in start.prompt.split_inclusive(' ') {
//!             cairn_guest::emit_text(word)?;
//!         }
//!         Ok(Outcome::Finished(start.prompt))
//!     }
//! }
//!
//! cairn_guest::controller!(Echo);
//! ```
//!
//! The controller sees no filesystem but its run generation's `artifacts/`
//! directory (its `/`), no network and no environment. Everything it emits is
//! journaled by the host; every answer it receives was journaled first, so a
//! run can be replayed.
#![deny(missing_docs)]

pub mod client_tools;
mod decisions;
mod history;
mod journal;
pub mod model;
pub mod tools;
mod types;
pub mod workers;

pub use decisions::{Answer, Approval, RequestKind, request, request_approval};
pub use history::{Role, Turn, turns};
pub use journal::{
    EmitError, Seq, emit_custom, emit_progress, emit_reasoning, emit_retrying, emit_text,
    emit_tool_call,
};
pub use types::{Error, Info, Outcome, Start};

/// What a controller implements.
///
/// The name and version the host sees come from the controller crate's
/// `Cargo.toml`, through [`controller!`].
pub trait Controller {
    /// Whether this controller can park: return [`Outcome::Parked`] when a
    /// decision wait answers [`Answer::Park`], and resume from
    /// [`Start::checkpoint`]. The host refuses the `park` liveness policy for
    /// a controller that cannot.
    const CAN_PARK: bool = false;

    /// Do one run. An `Err` ends the run `failed` with the error's code.
    fn run(start: Start) -> Result<Outcome, Error>;
}

/// Export a [`Controller`] as this component's implementation of the
/// `cairn:controller` world. Use it once, at the crate root.
#[macro_export]
macro_rules! controller {
    ($ty:ty) => {
        const _: () = {
            struct CairnExport;
            impl $crate::__bindings::Guest for CairnExport {
                fn describe() -> $crate::__bindings::cairn::controller::types::Info {
                    $crate::__private::info(
                        env!("CARGO_PKG_NAME"),
                        env!("CARGO_PKG_VERSION"),
                        <$ty as $crate::Controller>::CAN_PARK,
                    )
                }
                fn run(
                    start: $crate::__bindings::cairn::controller::types::Start,
                ) -> $crate::__bindings::cairn::controller::types::Outcome {
                    $crate::__private::run::<$ty>(start)
                }
            }
    $crate::__bindings::export!(CairnExport with_types_in $crate::__bindings);
        };
    };
}

#[doc(hidden)]
#[allow(clippy::too_many_arguments)]
pub mod __bindings {
    wit_bindgen::generate!({
        world: "agent",
        path: "wit",
        generate_all,
        pub_export_macro: true,
        export_macro_name: "export",
        default_bindings_module: "cairn_guest::__bindings",
    });
}

#[doc(hidden)]
pub mod __private {
    use crate::__bindings::cairn::controller::types as wit;

    pub fn info(name: &str, version: &str, can_park: bool) -> wit::Info {
        wit::Info {
            name: name.to_string(),
            version: version.to_string(),
            can_park,
        }
    }

    pub fn run<C: crate::Controller>(start: wit::Start) -> wit::Outcome {
        if let Ok(mut run) = crate::client_tools::RUN.lock() {
            *run = start.run_id.clone();
        }
        match C::run(start.into()) {
            Ok(outcome) => outcome.into(),
            Err(error) => wit::Outcome::Failed(wit::ControllerError {
                code: error.code,
                message: error.message,
            }),
        }
    }
}

/// The README's controller, compiled as a doctest so it stays true.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
