//! The libFuzzer entry point: `BOOTIMAGE_FUZZ_TARGET` names the target
//! (`fuzz/src/targets.rs`); `fuzz/run.sh` sets it.
#![no_main]

#[global_allocator]
static A: bootimage_fuzz::cap::Capped = bootimage_fuzz::cap::Capped;

fn target() -> bootimage_fuzz::targets::Target {
    static T: std::sync::OnceLock<bootimage_fuzz::targets::Target> = std::sync::OnceLock::new();
    *T.get_or_init(|| {
        let name = std::env::var("BOOTIMAGE_FUZZ_TARGET").unwrap_or_default();
        bootimage_fuzz::targets::by_name(&name).unwrap_or_else(|| {
            let all: Vec<&str> = bootimage_fuzz::targets::TARGETS
                .iter()
                .map(|t| t.0)
                .collect();
            eprintln!("set BOOTIMAGE_FUZZ_TARGET to one of: {}", all.join(" "));
            std::process::exit(2)
        })
    })
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| target()(data));
