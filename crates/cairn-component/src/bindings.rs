//! The host's `bindgen!`s of the `cairn:controller` world: the current
//! version (0.2.1, `wit/`), 0.2.0 (`wit/0.2.0/`) and 0.1.0 (`wit/0.1.0/`),
//! all linked so a
//! controller built against either runs. Exports are called through the
//! 0.1.0 bindings: `describe` and `run` and the records they carry did not
//! change, and the component model checks them by shape. Private: the rest
//! of the crate sees [`super`]'s curated types.

wasmtime::component::bindgen!({
    path: "../../wit/0.1.0",
    world: "controller",
    imports: { default: async | trappable },
    exports: { default: async },
});

pub use self::cairn::controller::{decisions, history, journal, types};

/// 0.2.0's imports (all but `history` are 0.2.1's too: the linker
/// resolves a 0.2.1 import of them to these).
pub mod v2 {
    wasmtime::component::bindgen!({
        path: "../../wit/0.2.0",
        world: "controller",
        imports: { default: async | trappable },
        exports: { default: async },
    });

    pub use self::cairn::controller::{decisions, history, journal, types, workers};
}

/// 0.2.1 (`wit/`): its `history` (system and tool turns, call ids) is the
/// one interface that changed, the only one linked from here.
pub mod v21 {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "controller",
        imports: { default: async | trappable },
        exports: { default: async },
    });

    pub use self::cairn::controller::history;
}
