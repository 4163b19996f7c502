#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| askloop_fuzz::script_file(data));
