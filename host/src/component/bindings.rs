//! The host's one `bindgen!` of the `cairn:controller` world. Private: the
//! rest of the crate sees [`super`]'s curated types.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "controller",
    imports: { default: async | trappable },
    exports: { default: async },
});

pub use self::cairn::controller::{decisions, history, journal, types};
