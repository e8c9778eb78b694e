#![allow(clippy::unwrap_used)]

use std::os::unix::fs::PermissionsExt;

use super::*;

fn read_all(path: &Path) -> FileReply {
    perform(&FileRequest::Read {
        path: path.to_owned(),
        offset: 0,
        limit: u64::MAX,
        max_bytes: 1 << 20,
        hash_limit: 1 << 20,
    })
}

fn failure(reply: FileReply) -> Failure {
    match reply {
        FileReply::Failed(f) => f,
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[test]
fn requests_and_replies_round_trip_and_garbage_is_refused() {
    let requests = [
        FileRequest::Read {
            path: "/a b/\u{e9}".into(),
            offset: 3,
            limit: 7,
            max_bytes: 9,
            hash_limit: 11,
        },
        FileRequest::Write {
            path: "/x".into(),
            content: b"\0\xff".to_vec(),
            expect: Expect::Same {
                size: 2,
                digest: [7; 32],
            },
        },
        FileRequest::Write {
            path: "/y".into(),
            content: Vec::new(),
            expect: Expect::Absent,
        },
    ];
    for r in requests {
        assert_eq!(FileRequest::decode(&r.encode()).unwrap(), r);
    }
    let replies = [
        FileReply::Read(ReadReply {
            size: 5,
            bytes: b"ab\n".to_vec(),
            cut: true,
            more: false,
            digest: Some([1; 32]),
        }),
        FileReply::Written(WriteReply {
            created: true,
            mode: 0o4755,
        }),
        FileReply::Failed(Failure {
            kind: FailureKind::Changed,
            message: "x".into(),
        }),
    ];
    for r in replies {
        assert_eq!(FileReply::decode(&r.encode()).unwrap(), r);
    }
    let mut long = requests_bytes();
    long.push(0);
    assert!(FileRequest::decode(&long).is_err());
    assert!(FileRequest::decode(b"DSHF1").is_err());
    assert!(FileRequest::decode(b"nope").is_err());
}

fn requests_bytes() -> Vec<u8> {
    FileRequest::Write {
        path: "/y".into(),
        content: b"z".to_vec(),
        expect: Expect::Absent,
    }
    .encode()
}

#[test]
fn a_read_selects_lines_within_the_byte_cap_and_hashes_the_whole_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    std::fs::write(&path, "one\ntwo\nthree\nfour").unwrap();
    let reply = perform(&FileRequest::Read {
        path: path.clone(),
        offset: 1,
        limit: 2,
        max_bytes: 100,
        hash_limit: 100,
    });
    let FileReply::Read(r) = reply else {
        panic!("{reply:?}")
    };
    assert_eq!(r.bytes, b"two\nthree\n");
    assert!(r.more && !r.cut);
    assert_eq!(r.size, 18);
    assert_eq!(r.digest, Some(Sha256::digest(b"one\ntwo\nthree\nfour")));
    let FileReply::Read(r) = read_all(&path) else {
        panic!()
    };
    assert_eq!(r.bytes, b"one\ntwo\nthree\nfour");
    assert!(!r.more && !r.cut);
    // The byte cap holds whatever the lines are; a file past the hash limit has no digest.
    let reply = perform(&FileRequest::Read {
        path,
        offset: 0,
        limit: u64::MAX,
        max_bytes: 5,
        hash_limit: 10,
    });
    let FileReply::Read(r) = reply else { panic!() };
    assert_eq!(r.bytes, b"one\nt");
    assert!(r.cut);
    assert_eq!(r.digest, None);
}

/// A FIFO with no writer and a device are refused at once, not read (the test would hang).
#[test]
fn fifos_devices_and_directories_are_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
    )
    .unwrap();
    for path in [fifo.as_path(), Path::new("/dev/zero"), dir.path()] {
        let f = failure(read_all(path));
        assert_eq!(f.kind, FailureKind::NotRegular, "{path:?}: {f:?}");
    }
    assert!(failure(read_all(&fifo)).message.contains("FIFO"));
    let f = failure(read_all(&dir.path().join("missing")));
    assert_eq!(f.kind, FailureKind::NotFound);
}

#[test]
fn writes_replace_atomically_keep_the_mode_and_check_what_they_replace() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("script.sh");
    std::fs::write(&path, "old\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o751)).unwrap();
    let write = |content: &[u8], expect| {
        perform(&FileRequest::Write {
            path: path.clone(),
            content: content.to_vec(),
            expect,
        })
    };
    let stale = Expect::Same {
        size: 4,
        digest: Sha256::digest(b"OLD\n"),
    };
    assert_eq!(failure(write(b"new\n", stale)).kind, FailureKind::Changed);
    assert_eq!(
        failure(write(b"new\n", Expect::Absent)).kind,
        FailureKind::Changed
    );
    assert_eq!(std::fs::read(&path).unwrap(), b"old\n");
    let current = Expect::Same {
        size: 4,
        digest: Sha256::digest(b"old\n"),
    };
    let FileReply::Written(w) = write(b"new\n", current) else {
        panic!()
    };
    assert!(!w.created);
    assert_eq!(w.mode, 0o751);
    assert_eq!(std::fs::read(&path).unwrap(), b"new\n");
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.permissions().mode() & 0o7777, 0o751);
    // No temporary file is left behind.
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(names.len(), 1);
}

#[test]
fn a_new_file_needs_its_parent_and_a_link_is_written_through() {
    let dir = tempfile::tempdir().unwrap();
    let f = failure(perform(&FileRequest::Write {
        path: dir.path().join("no/such/file"),
        content: b"x".to_vec(),
        expect: Expect::Absent,
    }));
    assert_eq!(f.kind, FailureKind::NoParent);
    assert!(f.message.contains("does not exist"), "{f:?}");
    let real = dir.path().join("real");
    std::fs::write(&real, "a").unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let reply = perform(&FileRequest::Write {
        path: link.clone(),
        content: b"b".to_vec(),
        expect: Expect::Same {
            size: 1,
            digest: Sha256::digest(b"a"),
        },
    });
    assert!(matches!(reply, FileReply::Written(_)), "{reply:?}");
    assert_eq!(std::fs::read(&real).unwrap(), b"b");
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

/// A file far larger than the caps (2 GiB, sparse) is read up to the byte cap and not hashed:
/// the reply is bounded whatever the file's size.
#[test]
fn a_huge_file_costs_only_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge");
    let file = File::create(&path).unwrap();
    file.set_len(2 << 30).unwrap();
    let reply = perform(&FileRequest::Read {
        path,
        offset: 0,
        limit: u64::MAX,
        max_bytes: 1024,
        hash_limit: 8 << 20,
    });
    let FileReply::Read(r) = reply else {
        panic!("{reply:?}")
    };
    assert_eq!(r.size, 2 << 30);
    assert_eq!(r.bytes.len(), 1024);
    assert!(r.cut && r.digest.is_none());
}
