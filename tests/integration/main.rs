//! Integration tests: one binary, a module per topic. They use the real
//! wasmtime engine, real components and real files.

mod api;
mod cli;
mod common;
mod fuzz_api;
mod hostile;
mod restore;
mod runtime;
mod skeleton;
mod stress;
mod store;
mod vocabulary;
mod workspaces;
