//! What each erofs-utils release of `mkfs.erofs` knows: the compression
//! algorithms, the `-E` extended options (with the release that added the
//! later ones and the values they take), and the short and long options.
//! Plain tables, read by the option mapping in [`super::map_options`].
/// Compression algorithms some erofs-utils release knows (erofs-utils
/// `lib/compressor.c`): any other name is a mistake in the OS's options.
pub const KNOWN_ALGORITHMS: &[&str] = &["lz4", "lz4hc", "lzma", "deflate", "libdeflate", "zstd"];
/// `-E` options of erofs-utils 1.5 (`mkfs/main.c` `parse_extended_opts`).
pub(super) const EXTENDED_1_5: &[&str] = &[
    "legacy-compress",
    "force-inode-compact",
    "force-inode-extended",
    "force-inode-blockmap",
    "force-chunk-indexes",
    "nosbcrc",
    "noinline_data",
    "ztailpacking",
];
/// `-E` options added later, with the release that added them.
pub(super) const EXTENDED_LATER: &[(&str, (u32, u32, u32))] = &[
    ("fragments", (1, 6, 0)),
    ("dedupe", (1, 6, 0)),
    ("all-fragments", (1, 7, 0)),
    ("xattr-name-filter", (1, 7, 0)),
    // `-Efragdedupe=inode|full` (erofs-utils commit 06875b3, "mkfs: support
    // `-Efragdedupe=inode`", first released in 1.8.5; RHCOS 10.1 asked for
    // it from 2025-04 to 2025-11, rhel-coreos-config image-rhel-10.1.yaml).
    ("fragdedupe", (1, 8, 5)),
    ("48bit", (1, 9, 0)),
];
/// An erofs-utils release as its changelog names it: `1.8.5`, or `1.5`
/// for a `.0`.
pub(super) fn release_str((major, minor, patch): (u32, u32, u32)) -> String {
    if patch > 0 {
        format!("{major}.{minor}.{patch}")
    } else {
        format!("{major}.{minor}")
    }
}
/// Values an extended option takes (`fragdedupe=`, erofs-utils mkfs/main.c).
pub(super) const EXTENDED_VALUES: &[(&str, &[&str])] = &[("fragdedupe", &["off", "inode", "full"])];
/// Options of erofs-utils 1.5 taking their value in the same word
/// (`-C1048576`) or after `=`, kept as they are.
pub(super) const SHORT_1_5: &[&str] = &["-C", "-T", "-U", "-x", "-d"];
pub(super) const LONG_1_5: &[&str] = &[
    "--quiet",
    "--all-root",
    "--ignore-mtime",
    "--preserve-mtime",
    "--force-uid",
    "--force-gid",
    "--max-extent-bytes",
    "--chunksize",
    "--exclude-path",
    "--exclude-regex",
    "--compress-hints",
    "--file-contexts",
    "--blobdev",
];
/// Long options of later releases that only tune the build (threads,
/// progress) and can be left out without changing the image's contents.
pub(super) const LONG_LATER_TUNING: &[&str] =
    &["--workers", "--zfeature-bits", "--sort", "--mkfs-time"];
