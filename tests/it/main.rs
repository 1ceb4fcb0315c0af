//! Every end-to-end test in one binary: the library (with egui, llama.cpp and ONNX
//! Runtime) is linked once instead of once per file, and the helpers in `support` are
//! compiled once. Each module is one area, as a user meets it.

mod support {
    pub mod library;
    pub mod mock_http;
    pub mod wire;
}

mod authoring;
mod cards;
mod chat_files;
mod cli;
mod companion;
mod gm_window;
mod identity;
mod interop;
mod keys;
mod local_model;
mod lorebooks;
mod memory;
mod pictures;
mod providers;
mod refusals;
mod scene;
mod serve;
mod stress;
mod tiles;
mod workbench;
