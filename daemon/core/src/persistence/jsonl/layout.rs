//! Where a JSONL session lives: `<root>/--<projectKey(cwd)>--/<dir(id)>/session.jsonl` (CONTRACTS
//! §4.4). Pure string and path computation: nothing here touches the file system, so
//! [`locate`](super::JsonlBackend) can use it on async paths.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use dsh_session::SessionHeader;

/// Name of the transcript inside a session directory.
pub(crate) const LOG_FILE: &str = "session.jsonl";

/// Longest file-name component Linux file systems accept (`NAME_MAX`).
const NAME_MAX: usize = 255;

/// Marker that introduces a hash suffix. Escapes are `~` followed by two *uppercase* hex digits,
/// so `~h` never occurs in an escaped string: a hashed name can never equal an unhashed one.
const HASH_MARK: &str = "~h";

/// Length of a hash suffix: the marker plus 32 hex digits (128 bits).
const HASH_SUFFIX_LEN: usize = HASH_MARK.len() + 32;

fn is_safe(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-')
}

fn push_escaped(out: &mut String, byte: u8) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.push('~');
    out.push(char::from(HEX[usize::from(byte >> 4)]));
    out.push(char::from(HEX[usize::from(byte & 0x0f)]));
}

/// Escapes a session id into one path component: bytes in `[A-Za-z0-9._-]` are kept, every other
/// byte (including `~` and every byte of a non-ASCII character) becomes `~XX` in uppercase hex, and
/// the ids `.` and `..` are escaped whole (`~2E`, `~2E~2E`).
///
/// Injective: `~` only ever starts an escape, so the original bytes can be read back. The result
/// never contains `/`, is never `.` or `..`, and so cannot climb out of its directory. It can be up
/// to three times longer than the id; [`session_dir_name`] keeps it within `NAME_MAX`.
pub(crate) fn escape_id(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    push_escaped_id(&mut out, id);
    out
}

/// Appends [`escape_id`]`(id)` to `out`.
fn push_escaped_id(out: &mut String, id: &str) {
    if id == "." || id == ".." {
        for _ in 0..id.len() {
            out.push_str("~2E");
        }
        return;
    }
    for &byte in id.as_bytes() {
        if is_safe(byte) {
            out.push(char::from(byte));
        } else {
            push_escaped(out, byte);
        }
    }
}

/// The name of a session's directory: `escape_id` of the id when that fits in one path
/// component (255 bytes), which covers every UUID and any id of up to 85 bytes.
///
/// Longer escapes (an id may be 256 bytes, so its escape up to 768) cannot be mapped injectively
/// into 255 bytes at all, so they keep their first bytes (cut on an escape boundary) followed by
/// `~h` and a 128-bit FNV-1a hash of the whole id. The hash is not cryptographic; what keeps a
/// crafted collision harmless is that the backend never overwrites an existing log and checks on
/// every read that the stored header names the id that was asked for.
pub fn session_dir_name(id: &str) -> String {
    fit_with_hash(escape_id(id), id.as_bytes(), NAME_MAX)
}

/// A file named after session `id` with `extension` (`<id>.jsonl`, `<id>.zip`): the id escaped
/// and fitted as [`session_dir_name`] does it, leaving room for the extension, so any id is one
/// path component that is neither `.` nor `..` and never climbs out of its directory.
pub(crate) fn session_file_name(id: &str, extension: &str) -> String {
    let limit = NAME_MAX.saturating_sub(extension.len() + 1);
    format!(
        "{}.{extension}",
        fit_with_hash(escape_id(id), id.as_bytes(), limit)
    )
}

/// The project key of a working directory: `/` separators become `-`, runs of `-` collapse to
/// one, leading `-` are stripped, bytes outside `[A-Za-z0-9._-]` become `~XX`, and `/` alone (or
/// anything that leaves nothing) becomes `root`. Lossy by design (`/a/b-c` and `/a-b/c` share a
/// project directory; the session ids still keep the sessions apart).
///
/// The directory name `--<key>--` must stay within 255 bytes, so a longer key is cut on an escape
/// boundary and its tail replaced by `~h` and a 128-bit FNV-1a hash of the full cwd: distinct long
/// cwds stay in distinct directories instead of merging on a shared prefix.
pub(crate) fn project_key(cwd: &Path) -> String {
    let bytes = cwd.as_os_str().as_bytes();
    let mut key = String::with_capacity(bytes.len());
    push_project_key(&mut key, bytes);
    fit_with_hash(key, bytes, NAME_MAX - 4)
}

/// Appends the project key of the cwd `bytes` to `out`, before any cut to length.
fn push_project_key(out: &mut String, bytes: &[u8]) {
    let start = out.len();
    for &byte in bytes {
        let byte = if byte == b'/' { b'-' } else { byte };
        if byte == b'-' && (out.len() == start || out.ends_with('-')) {
            // Leading dashes are stripped and runs collapse: both mean "skip this one".
            continue;
        }
        if is_safe(byte) {
            out.push(char::from(byte));
        } else {
            push_escaped(out, byte);
        }
    }
    if out.len() == start {
        out.push_str("root");
    }
}

/// The project directory name for a cwd: `--<projectKey>--`.
pub fn project_dir_name(cwd: &Path) -> String {
    format!("--{}--", project_key(cwd))
}

/// True for names [`project_dir_name`] can produce; other entries under the root are ignored.
pub(crate) fn is_project_dir_name(name: &str) -> bool {
    name.len() >= 5 && name.starts_with("--") && name.ends_with("--")
}

/// The session's log file under `root`.
///
/// Built in one buffer (the bound of its length reserved up front) when `root` is UTF-8, as it
/// practically always is: `locate` runs for every bash call, and the three intermediate names and
/// two joins cost more allocations than the rest of the call's managed environment together.
pub fn log_path(root: &Path, header: &SessionHeader) -> PathBuf {
    let Some(root_text) = root.to_str() else {
        let mut path = root.join(project_dir_name(&header.cwd));
        path.push(session_dir_name(header.id.as_str()));
        path.push(LOG_FILE);
        return path;
    };
    let cwd = header.cwd.as_os_str().as_bytes();
    let id = header.id.as_str();
    // Escapes at most triple a byte; a name cut with a hash is never longer than its limit.
    let bound = root_text.len()
        + 1
        + (cwd.len() * 3).min(NAME_MAX)
        + 4
        + 1
        + (id.len() * 3).min(NAME_MAX)
        + 1
        + LOG_FILE.len()
        + "root".len();
    let mut path = String::with_capacity(bound);
    path.push_str(root_text);
    if !path.ends_with('/') {
        path.push('/');
    }
    path.push_str("--");
    let start = path.len();
    push_project_key(&mut path, cwd);
    fit_tail_with_hash(&mut path, start, cwd, NAME_MAX - 4);
    path.push_str("--/");
    let start = path.len();
    push_escaped_id(&mut path, id);
    fit_tail_with_hash(&mut path, start, id.as_bytes(), NAME_MAX);
    path.push('/');
    path.push_str(LOG_FILE);
    PathBuf::from(path)
}

/// Cuts `buf[start..]` with a hash suffix, as [`fit_with_hash`] would cut it alone, when it is
/// longer than `limit`.
fn fit_tail_with_hash(buf: &mut String, start: usize, hashed: &[u8], limit: usize) {
    if buf.len() - start > limit {
        let fitted = fit_with_hash(buf[start..].to_owned(), hashed, limit);
        buf.truncate(start);
        buf.push_str(&fitted);
    }
}

/// Returns `name` unchanged when it fits in `limit` bytes; otherwise its longest prefix that ends
/// on an escape boundary and leaves room for the hash suffix, followed by the suffix.
fn fit_with_hash(mut name: String, hashed: &[u8], limit: usize) -> String {
    if name.len() <= limit {
        return name;
    }
    let mut cut = limit - HASH_SUFFIX_LEN;
    // Escapes are `~XX`: if one of the two bytes before the cut is `~`, the cut splits it.
    let bytes = name.as_bytes();
    for back in 1..=2 {
        if cut >= back && bytes[cut - back] == b'~' {
            cut -= back;
            break;
        }
    }
    name.truncate(cut);
    name.push_str(HASH_MARK);
    name.push_str(&format!("{:032x}", fnv1a_128(hashed)));
    name
}

/// FNV-1a, 128-bit: stable across Rust versions and platforms (unlike `std`'s hasher), which
/// matters because the result is part of an on-disk path.
fn fnv1a_128(bytes: &[u8]) -> u128 {
    const OFFSET: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;
    bytes.iter().fold(OFFSET, |hash, &byte| {
        (hash ^ u128::from(byte)).wrapping_mul(PRIME)
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::path::Component;

    use proptest::prelude::*;

    use super::*;
    use dsh_session::SessionId;

    #[test]
    fn escape_examples() {
        assert_eq!(escape_id("0190a-b_c.d"), "0190a-b_c.d");
        assert_eq!(escape_id("."), "~2E");
        assert_eq!(escape_id(".."), "~2E~2E");
        assert_eq!(escape_id("..."), "...");
        assert_eq!(escape_id("../../x"), "..~2F..~2Fx");
        assert_eq!(escape_id("a/b"), "a~2Fb");
        assert_eq!(escape_id("~"), "~7E");
        assert_eq!(escape_id("ü/.."), "~C3~BC~2F..");
        assert_eq!(escape_id("a b"), "a~20b");
    }

    #[test]
    fn a_file_named_after_any_id_is_one_component_with_its_extension() {
        let v7 = SessionId::new_v7();
        assert_eq!(
            session_file_name(v7.as_str(), "jsonl"),
            format!("{v7}.jsonl")
        );
        assert_eq!(session_file_name("../../x", "zip"), "..~2F..~2Fx.zip");
        assert_eq!(session_file_name("..", "md"), "~2E~2E.md");
        let long = "ü".repeat(128);
        let name = session_file_name(&long, "jsonl");
        assert!(name.len() <= NAME_MAX && name.ends_with(".jsonl") && !name.contains('/'));
    }

    #[test]
    fn escape_is_injective_on_tricky_neighbours() {
        let ids = [
            ".", "..", "~2E", "~2E~2E", "~", "~7E", "a/b", "a~2Fb", "a~b", "~h", "...",
        ];
        let escaped: HashSet<_> = ids.iter().map(|id| escape_id(id)).collect();
        assert_eq!(escaped.len(), ids.len());
    }

    #[test]
    fn project_key_examples() {
        assert_eq!(
            project_key(Path::new("/home/u/work/dsh")),
            "home-u-work-dsh"
        );
        assert_eq!(project_key(Path::new("/")), "root");
        assert_eq!(project_key(Path::new("//")), "root");
        assert_eq!(project_key(Path::new("/a//b--c/")), "a-b-c-");
        assert_eq!(project_key(Path::new("/-x")), "x");
        assert_eq!(project_key(Path::new("/开/~a")), "~E5~BC~80-~7Ea");
        assert_eq!(project_dir_name(Path::new("/")), "--root--");
        assert!(is_project_dir_name("--root--"));
        assert!(!is_project_dir_name("----") && !is_project_dir_name("root"));
    }

    #[test]
    fn long_cwds_are_cut_with_a_hash_and_stay_distinct() {
        let a = PathBuf::from(format!("/{}/a", "ü".repeat(200)));
        let b = PathBuf::from(format!("/{}/b", "ü".repeat(200)));
        let (ka, kb) = (project_dir_name(&a), project_dir_name(&b));
        assert!((250..=255).contains(&ka.len()), "{ka}");
        assert_ne!(ka, kb);
        assert!(ka.contains(HASH_MARK));
        // The cut never splits an escape: everything before the marker is whole `~XX` groups.
        let stem = &ka[2..ka.find(HASH_MARK).unwrap_or(0)];
        assert_eq!(stem.len() % 3, 0, "{stem}");
        // Exactly at the limit: no hash.
        let fits = PathBuf::from(format!("/{}", "x".repeat(251)));
        assert_eq!(project_dir_name(&fits), format!("--{}--", "x".repeat(251)));
    }

    #[test]
    fn long_ids_fit_one_component() {
        let long = "x".repeat(256);
        let name = session_dir_name(&long);
        assert!(name.len() <= NAME_MAX && name.contains(HASH_MARK), "{name}");
        assert_ne!(session_dir_name(&"x".repeat(255)), name);
        assert_eq!(session_dir_name(&"x".repeat(255)), "x".repeat(255));
        let wide = "ü".repeat(128);
        assert!(session_dir_name(&wide).len() <= NAME_MAX);
    }

    fn hostile_id() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            Just(".".to_owned()),
            Just("..".to_owned()),
            Just("/".to_owned()),
            Just("~".to_owned()),
            Just("~2E".to_owned()),
            Just("-".to_owned()),
            "[a-z]{1,3}",
            any::<char>()
                .prop_filter("no NUL", |c| *c != '\0')
                .prop_map(String::from),
        ];
        proptest::collection::vec(piece, 1..120).prop_map(|pieces| {
            let mut id = String::new();
            for piece in pieces {
                if id.len() + piece.len() > 256 {
                    break;
                }
                id.push_str(&piece);
            }
            if id.is_empty() { "x".to_owned() } else { id }
        })
    }

    fn located(root: &Path, id: &str) -> PathBuf {
        let header = SessionHeader::new(
            SessionId::parse(id).unwrap_or_else(|e| panic!("{id:?}: {e}")),
            PathBuf::from("/work/project"),
            0,
        );
        log_path(root, &header)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn located_paths_stay_inside_the_root(a in hostile_id(), b in hostile_id()) {
            let root = Path::new("/srv/dsh/sessions");
            let path = located(root, &a);
            prop_assert!(path.starts_with(root));
            let root_len = root.components().count();
            prop_assert_eq!(path.components().count(), root_len + 3);
            for component in path.components().skip(root_len) {
                let Component::Normal(name) = component else {
                    return Err(TestCaseError::fail(format!("{component:?} in {path:?}")));
                };
                prop_assert!(name.len() <= NAME_MAX);
            }
            if a != b {
                prop_assert_ne!(path, located(root, &b));
            }
        }

        /// The one-buffer path is exactly the three names joined, for any id and cwd.
        #[test]
        fn log_path_is_the_joined_names(id in hostile_id(), cwd in "/[^\u{0}]{0,300}") {
            let header = SessionHeader::new(SessionId::parse(&id).unwrap(), cwd.into(), 0);
            for root in [Path::new("/srv/dsh/sessions"), Path::new("/srv/dsh/sessions/"), Path::new("/")] {
                let mut joined = root.join(project_dir_name(&header.cwd));
                joined.push(session_dir_name(header.id.as_str()));
                joined.push(LOG_FILE);
                let built = log_path(root, &header);
                prop_assert_eq!(built.as_os_str(), joined.as_os_str());
            }
        }
    }
}
