//! Bad input refused with a message naming what is wrong, and the store left as it was: a cut
//! ZIP, a cut Zstandard frame, a checksum that does not match (Zstandard and ZIP), a format
//! version this dsh does not read, a 2 GiB file (read in bounded memory), and ZIP entries that
//! climb out of their directory.

use std::io::Write as _;

use super::*;

/// Imports each of `cases` (a file name, its bytes, what the refusal must say) into one daemon
/// holding one session, and checks that each is refused and the store never changes.
fn refused(cases: Vec<(&str, Vec<u8>, &str)>) {
    let daemon = TestDaemon::start();
    let (parent, _) = session_with_child(&daemon);
    daemon.dshctl(&["agent", "close", &parent]);
    let sessions = daemon.home.join("sessions");
    let before = tree(&sessions);
    let listed = daemon.dshctl_json(&["session", "list", "--all"])["sessions"].clone();
    for (name, bytes, says) in cases {
        let path = daemon.dir.path().join(name);
        std::fs::write(&path, &bytes).unwrap();
        let stderr = import_refused(&daemon, &path);
        assert!(stderr.contains(says), "{name}: {says:?} not in: {stderr}");
        assert!(stderr.contains("nothing was imported"), "{name}: {stderr}");
        assert_eq!(tree(&sessions), before, "{name}: the store changed");
        assert_eq!(
            daemon.dshctl_json(&["session", "list", "--all"])["sessions"],
            listed,
            "{name}"
        );
        assert_eq!(
            std::fs::read(&path).unwrap(),
            bytes,
            "{name}: the source changed"
        );
    }
}

/// A Zstandard frame with a content checksum.
fn zstd_frame(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = zstd::stream::Encoder::new(Vec::new(), 3).unwrap();
    encoder.include_checksum(true).unwrap();
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

/// The upstream fixture as frames: the header's, then the events'.
fn upstream_frames() -> (Vec<u8>, Vec<u8>) {
    let text = std::fs::read(fixture("upstream/session.jsonl")).unwrap();
    let split = text.iter().position(|&b| b == b'\n').unwrap() + 1;
    (zstd_frame(&text[..split]), zstd_frame(&text[split..]))
}

fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for (name, bytes) in entries {
        zip.start_file(*name, options).unwrap();
        zip.write_all(bytes).unwrap();
    }
    zip.finish().unwrap().into_inner()
}

#[test]
fn damaged_and_foreign_files_are_refused_and_nothing_is_stored() {
    let (header, events) = upstream_frames();
    let whole = [header.clone(), events.clone()].concat();
    let cut_frame = whole[..whole.len() - 9].to_vec();
    let mut bad_checksum = whole.clone();
    let last = bad_checksum.len() - 1;
    bad_checksum[last] ^= 0xff;

    let log = std::fs::read(fixture("upstream/session.jsonl")).unwrap();
    let foreign = String::from_utf8(log.clone())
        .unwrap()
        .replacen("\"version\":0", "\"version\":3", 1)
        .into_bytes();
    let dsh_foreign = b"{\"type\":\"session\",\"version\":7,\"id\":\"x\",\"createdAt\":1,\"cwd\":\"/tmp\",\"delegationDepth\":0}\n{\"type\":\"turn/start\",\"seq\":0,\"time\":1,\"data\":{\"turn\":1}}\n".to_vec();

    let bundle = zip_of(&[("session.jsonl", &log)]);
    let cut_zip = bundle[..bundle.len() - 30].to_vec();
    // A byte of the stored log changed where its CRC-32 says otherwise.
    let stored = {
        let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored);
        zip.start_file("session.jsonl", options).unwrap();
        zip.write_all(&log).unwrap();
        zip.finish().unwrap().into_inner()
    };
    let mut bad_crc = stored.clone();
    // In the last line, so that every line still reads and only the checksum tells.
    let at = bad_crc.windows(9).rposition(|w| w == b"completed").unwrap();
    bad_crc[at] = b'C';
    let traversal = zip_of(&[
        ("session.jsonl", &log),
        ("../../escaped/session.jsonl", &log),
    ]);
    let absolute = zip_of(&[("session.jsonl", &log), ("/tmp/escaped-abs", &log)]);
    let newer_bundle = zip_of(&[
        (
            "manifest.json",
            br#"{"format":"dsh-session-bundle","bundleVersion":9,"logFormatVersion":0}"#,
        ),
        ("session.jsonl", &log),
    ]);

    refused(vec![
        (
            "cut-frame.jsonl.zstd",
            cut_frame,
            "the Zstandard stream is cut short",
        ),
        ("bad-checksum.jsonl.zstd", bad_checksum, "checksum"),
        (
            "foreign.jsonl",
            foreign,
            "upstream DeepSeek Harness log format version 3 is not supported (this dsh reads version 0)",
        ),
        (
            "dsh-foreign.jsonl",
            dsh_foreign,
            "dsh log format version 7 is not supported",
        ),
        ("cut.zip", cut_zip, "not a readable ZIP archive"),
        (
            "bad-crc.zip",
            bad_crc,
            "ZIP entry session.jsonl cannot be read",
        ),
        (
            "traversal.zip",
            traversal,
            "names a path outside the bundle",
        ),
        ("absolute.zip", absolute, "names a path outside the bundle"),
        (
            "newer.zip",
            newer_bundle,
            "dsh bundle log format version 9 is not supported",
        ),
        ("empty.jsonl", Vec::new(), "is empty"),
        (
            "not-a-session.jsonl",
            b"{\"hello\":1}\n".to_vec(),
            "neither a session log",
        ),
    ]);
    assert!(!std::env::temp_dir().join("escaped-abs").exists());
}

/// A FIFO or a directory is refused without waiting on it.
#[test]
fn only_regular_files_are_imported() {
    let daemon = TestDaemon::start();
    let fifo = daemon.dir.path().join("fifo");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    for path in [fifo.as_path(), daemon.dir.path()] {
        let stderr = import_refused(&daemon, path);
        assert!(stderr.contains("not a regular file"), "{stderr}");
    }
}

/// A 2 GiB file whose second line never ends: refused at the line bound, having held no more
/// than that bound in memory, and nothing stored.
#[test]
fn a_2_gib_file_is_read_in_bounded_memory() {
    let daemon = TestDaemon::start();
    let path = daemon.dir.path().join("huge.jsonl");
    let header = b"{\"type\":\"session\",\"version\":0,\"id\":\"huge\",\"createdAt\":1,\"cwd\":\"/tmp\",\"delegationDepth\":0}\n";
    let mut file = std::fs::File::create(&path).unwrap();
    file.write_all(header).unwrap();
    file.write_all(
        b"{\"type\":\"turn/start\",\"seq\":0,\"time\":1,\"data\":{\"turn\":1},\"pad\":\"",
    )
    .unwrap();
    // Sparse: 2 GiB of zero bytes that take no disk.
    file.set_len(2 << 30).unwrap();
    drop(file);
    let sessions = daemon.home.join("sessions");
    let before = tree(&sessions);
    let stderr = import_refused(&daemon, &path);
    assert!(
        stderr.contains("line 2 of the file is longer than 256 MiB"),
        "{stderr}"
    );
    assert_eq!(tree(&sessions), before);
    let status = std::fs::read_to_string(format!("/proc/{}/status", daemon.child.id())).unwrap();
    let peak_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    // About twice the line bound (256 MiB): the line's buffer while it last doubles, and the
    // smaller ones before it, freed but not yet returned by the allocator. Far from the file's
    // 2 GiB, and the same for any larger file.
    eprintln!("dshd peaked at {peak_kib} KiB importing a 2 GiB file");
    assert!(peak_kib < 640 * 1024, "dshd peaked at {peak_kib} KiB");
}
