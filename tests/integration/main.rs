//! Integration tests: one binary, a module per topic. They use the real
//! wasmtime engine, real components and real files.

mod a2a;
mod api;
mod api_errors;
mod authority;
mod browser;
mod budgets;
mod cli;
mod clients;
mod common;
mod corruption;
mod delegation;
mod doctor;
mod fuzz;
mod fuzz_api;
mod hostile;
mod isolation;
mod lifecycle;
mod memory;
mod migrate;
mod peers;
mod postgres;
mod queue;
mod queue_files;
mod restore;
mod runtime;
mod scale_out;
mod session_names;
mod shared_store;
mod skeleton;
mod store;
mod stress;
mod viewer;
mod vocabulary;
mod wit_versions;
mod workspaces;
