#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| askloop_fuzz::config_file(data));
