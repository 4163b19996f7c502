#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| askloop_fuzz::openai_stream(data));
