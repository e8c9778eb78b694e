//! `Persistence.ListSessions` in pages: the request checked field by field, the opaque page token,
//! and one page made of the backend's page and the live agents.
//!
//! The token is `p1`, the order (`n`/`o`), a fingerprint of the cwd filter, then the key of the
//! last session listed — its `createdAt` and its id — in hex. It is opaque to clients; it only
//! has to be stable (a key never changes) and checkable: a token that does not decode, or that
//! belongs to another order or cwd, is refused naming `page_token`.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use dsh_core::{
    ListKey, MAX_PAGE_SIZE, Order, Page, PageQuery, Persistence, PersistenceError, SessionHeader,
    SessionId, SessionMeta, listed_before,
};
use dsh_proto::v1;
use tonic::Status;

/// Sessions per page when the request does not say.
pub const DEFAULT_PAGE_SIZE: usize = 100;

const TOKEN_VERSION: &str = "p1";

/// The query a request asks for, checked.
pub fn query(request: &v1::ListSessionsRequest) -> Result<PageQuery, Status> {
    let limit = match request.page_size {
        None => DEFAULT_PAGE_SIZE,
        Some(size) => match usize::try_from(size) {
            Ok(size) if (1..=MAX_PAGE_SIZE).contains(&size) => size,
            _ => {
                return Err(Status::invalid_argument(format!(
                    "page_size: {size} is out of range; give 1 to {MAX_PAGE_SIZE}, or leave it \
                     unset for {DEFAULT_PAGE_SIZE}"
                )));
            }
        },
    };
    let order = match v1::SessionOrder::try_from(request.order) {
        Ok(v1::SessionOrder::NewestFirst) => Order::NewestFirst,
        Ok(v1::SessionOrder::OldestFirst) => Order::OldestFirst,
        Err(_) => {
            return Err(Status::invalid_argument(format!(
                "order: {} is not a SessionOrder",
                request.order
            )));
        }
    };
    let cwd = if request.cwd.is_empty() {
        None
    } else {
        let path = Path::new(&request.cwd);
        if !path.is_absolute() {
            return Err(Status::invalid_argument(format!(
                "cwd: {:?} is not an absolute path",
                request.cwd
            )));
        }
        Some(dsh_core::home::normalize(path))
    };
    let host = (!request.host.is_empty()).then(|| request.host.clone());
    let after = if request.page_token.is_empty() {
        None
    } else {
        let filter = filter_key(cwd.as_deref(), host.as_deref());
        Some(decode(&request.page_token, order, filter.as_deref())?)
    };
    Ok(PageQuery {
        after,
        limit,
        order,
        cwd,
        host,
    })
}

/// One page of stored sessions for a listing, with each one's metadata: the backend's pages
/// read on until `query.limit` sessions are found, leaving archived ones out unless
/// `include_archived`. A session whose metadata cannot be read is listed without it (a damaged
/// log still shows up, for `session repair`).
pub async fn stored_page(
    backend: &dyn Persistence,
    query: &PageQuery,
    include_archived: bool,
) -> Result<(Page, HashMap<SessionId, SessionMeta>), PersistenceError> {
    let mut out = Page::default();
    let mut metas = HashMap::new();
    let mut asked = query.clone();
    loop {
        let page = backend.list_page(&asked).await?;
        let Some(last) = page.headers.last().map(ListKey::of) else {
            return Ok((out, metas));
        };
        let mut creators = page.creators;
        let ids: Vec<SessionId> = page.headers.iter().map(|h| h.id.clone()).collect();
        let mut page_metas = match backend.metas(&ids).await {
            Ok(metas) => metas,
            Err(error) => {
                tracing::warn!(%error, "listing sessions without their titles");
                ids.iter()
                    .map(|id| (id.clone(), Ok(SessionMeta::default())))
                    .collect()
            }
        };
        let mut headers = page.headers.into_iter();
        for h in headers.by_ref() {
            let meta = match page_metas.remove(&h.id) {
                Some(Ok(meta)) => meta,
                // Deleted since the page was read.
                None => continue,
                Some(Err(error)) => {
                    tracing::warn!(session = %h.id, %error, "listing a session without its title");
                    SessionMeta::default()
                }
            };
            if meta.archived && !include_archived {
                continue;
            }
            metas.insert(h.id.clone(), meta);
            if let Some(creator) = creators.remove(&h.id) {
                out.creators.insert(h.id.clone(), creator);
            }
            out.headers.push(h);
            if out.headers.len() == query.limit {
                break;
            }
        }
        if out.headers.len() == query.limit {
            out.more = headers.next().is_some() || page.more;
            return Ok((out, metas));
        }
        if !page.more {
            return Ok((out, metas));
        }
        asked.after = Some(last);
    }
}

/// What a token's fingerprint covers: the cwd filter, and the host filter when there is one
/// (joined by a NUL, which no path or host name holds).
fn filter_key(cwd: Option<&Path>, host: Option<&str>) -> Option<std::path::PathBuf> {
    use std::os::unix::ffi::OsStringExt;
    let Some(host) = host else {
        return cwd.map(Path::to_path_buf);
    };
    let mut bytes = cwd
        .map(|c| c.as_os_str().to_owned().into_vec())
        .unwrap_or_default();
    bytes.extend_from_slice(b"\0host=");
    bytes.extend_from_slice(host.as_bytes());
    Some(std::ffi::OsString::from_vec(bytes).into())
}

/// One page of the listing: the backend's page merged with the live agents that belong on it
/// (a new agent is listed before its first checkpoint stores it), each listed once, and the
/// token of the next page (empty after the last).
pub fn merge(
    query: &PageQuery,
    stored: Page,
    live: &[SessionHeader],
) -> (Vec<(SessionHeader, bool)>, String) {
    let live_ids: HashSet<&SessionId> = live.iter().map(|h| &h.id).collect();
    let stored_ids: HashSet<SessionId> = stored.headers.iter().map(|h| h.id.clone()).collect();
    let mut headers = stored.headers;
    headers.extend(
        live.iter()
            .filter(|h| !stored_ids.contains(&h.id) && query.admits(h))
            .cloned(),
    );
    headers.sort_by(|a, b| listed_before(a, b, query.order));
    let more = stored.more || headers.len() > query.limit;
    headers.truncate(query.limit);
    let token = match headers.last() {
        Some(last) if more => encode(
            &ListKey::of(last),
            query.order,
            filter_key(query.cwd.as_deref(), query.host.as_deref()).as_deref(),
        ),
        _ => String::new(),
    };
    let page = headers
        .into_iter()
        .map(|h| {
            let is_live = live_ids.contains(&h.id);
            (h, is_live)
        })
        .collect();
    (page, token)
}

/// The token of a page that continues after `key`.
pub fn encode(key: &ListKey, order: Order, cwd: Option<&Path>) -> String {
    let mut token = String::from(TOKEN_VERSION);
    token.push(order_char(order));
    token.push_str(&format!("{:016x}", fingerprint(cwd)));
    token.push_str(&format!("{:016x}", key.created_at.cast_unsigned()));
    for byte in key.id.as_str().bytes() {
        token.push_str(&format!("{byte:02x}"));
    }
    token
}

/// The key a token continues after, if it is a token of this order and cwd.
pub fn decode(token: &str, order: Order, cwd: Option<&Path>) -> Result<ListKey, Status> {
    // The field at fault is also a `google.rpc.BadRequest` violation, for clients that name it
    // in their own terms (the ACP bridge's `cursor`).
    let bad = |why: &str| {
        use tonic_types::StatusExt as _;
        Status::with_error_details(
            tonic::Code::InvalidArgument,
            format!("page_token: {why}"),
            tonic_types::ErrorDetails::with_bad_request_violation("page_token", why),
        )
    };
    let not_ours = || bad("not a token this daemon issued; give next_page_token unchanged");
    let rest = token.strip_prefix(TOKEN_VERSION).ok_or_else(not_ours)?;
    let mut chars = rest.chars();
    let token_order = chars.next().ok_or_else(not_ours)?;
    let rest = chars.as_str();
    if rest.len() < 32 || !rest.is_ascii() {
        return Err(not_ours());
    }
    let (filter, rest) = rest.split_at(16);
    let (created_at, id) = rest.split_at(16);
    let filter = u64::from_str_radix(filter, 16).map_err(|_| not_ours())?;
    let created_at = u64::from_str_radix(created_at, 16)
        .map_err(|_| not_ours())?
        .cast_signed();
    let id = hex_bytes(id).ok_or_else(not_ours)?;
    let id = String::from_utf8(id).map_err(|_| not_ours())?;
    let id = SessionId::parse(id).map_err(|_| not_ours())?;
    if token_order != order_char(order) || filter != fingerprint(cwd) {
        return Err(bad(
            "it belongs to a listing with another order or cwd; ask with the same order and cwd \
             as the page it came from",
        ));
    }
    Ok(ListKey { created_at, id })
}

fn order_char(order: Order) -> char {
    match order {
        Order::NewestFirst => 'n',
        Order::OldestFirst => 'o',
    }
}

/// FNV-1a of the cwd filter's bytes (0 without a filter): enough to tell a token of another
/// listing, not a security measure (the token grants nothing).
fn fingerprint(cwd: Option<&Path>) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    let Some(cwd) = cwd else {
        return 0;
    };
    cwd.as_os_str()
        .as_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325, |hash: u64, &byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        })
        .max(1)
}

fn hex_bytes(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(created_at: i64, id: &str) -> ListKey {
        ListKey {
            created_at,
            id: SessionId::parse(id).unwrap(),
        }
    }

    #[test]
    fn tokens_round_trip_and_refuse_other_listings() {
        let cwd = Path::new("/w/p");
        for key in [
            key(0, "a"),
            key(1_700_000_000_000, "ü/../\n"),
            key(-1, &"x".repeat(256)),
        ] {
            for order in [Order::NewestFirst, Order::OldestFirst] {
                for filter in [None, Some(cwd)] {
                    let token = encode(&key, order, filter);
                    assert_eq!(decode(&token, order, filter).unwrap(), key);
                }
            }
            let token = encode(&key, Order::NewestFirst, Some(cwd));
            for (order, filter) in [
                (Order::OldestFirst, Some(cwd)),
                (Order::NewestFirst, None),
                (Order::NewestFirst, Some(Path::new("/w/q"))),
            ] {
                let err = decode(&token, order, filter).unwrap_err();
                assert!(err.message().contains("another order or cwd"), "{err:?}");
            }
        }
    }

    #[test]
    fn malformed_tokens_are_invalid_arguments_naming_the_field() {
        let good = encode(&key(5, "s"), Order::NewestFirst, None);
        for bad in [
            "x",
            "p1",
            "p1n",
            "p2n00000000000000000000000000000005",
            &good[..good.len() - 1],
            &format!("{good}zz"),
            &good.replace('p', "\u{fc}"),
            "p1n0000000000000000000000000000000500",
        ] {
            let err = decode(bad, Order::NewestFirst, None).unwrap_err();
            assert_eq!(err.code(), tonic::Code::InvalidArgument, "{bad:?}");
            assert!(
                err.message().starts_with("page_token: "),
                "{bad:?}: {err:?}"
            );
            let violations = tonic_types::StatusExt::get_details_bad_request(&err)
                .map(|b| b.field_violations)
                .unwrap_or_default();
            assert_eq!(violations.len(), 1, "{bad:?}: {err:?}");
            assert_eq!(violations[0].field, "page_token");
        }
    }

    #[test]
    fn page_sizes_outside_the_range_are_refused() {
        for size in [Some(0), Some(1001), Some(u32::MAX)] {
            let request = v1::ListSessionsRequest {
                page_size: size,
                ..Default::default()
            };
            let err = query(&request).unwrap_err();
            assert_eq!(err.code(), tonic::Code::InvalidArgument);
            assert!(err.message().starts_with("page_size: "), "{err:?}");
        }
        let ok = |size| {
            query(&v1::ListSessionsRequest {
                page_size: size,
                ..Default::default()
            })
            .unwrap()
            .limit
        };
        assert_eq!(
            (ok(None), ok(Some(1)), ok(Some(1000))),
            (DEFAULT_PAGE_SIZE, 1, 1000)
        );
        for (request, field) in [
            (
                v1::ListSessionsRequest {
                    order: 7,
                    ..Default::default()
                },
                "order: ",
            ),
            (
                v1::ListSessionsRequest {
                    cwd: "rel".into(),
                    ..Default::default()
                },
                "cwd: ",
            ),
        ] {
            let err = query(&request).unwrap_err();
            assert!(err.message().starts_with(field), "{err:?}");
        }
    }

    #[test]
    fn live_sessions_are_merged_once_in_order() {
        let h =
            |id: &str, at: i64| SessionHeader::new(SessionId::parse(id).unwrap(), "/w".into(), at);
        let query = PageQuery {
            after: None,
            limit: 3,
            order: Order::NewestFirst,
            cwd: None,
            host: None,
        };
        let stored = Page {
            headers: vec![h("s5", 5), h("s3", 3), h("s1", 1)],
            more: true,
            ..Page::default()
        };
        // s3 is stored and live; new4 is live only.
        let (page, token) = merge(&query, stored, &[h("s3", 3), h("new4", 4)]);
        let listed: Vec<(&str, bool)> = page
            .iter()
            .map(|(h, live)| (h.id.as_str(), *live))
            .collect();
        assert_eq!(listed, [("s5", false), ("new4", true), ("s3", true)]);
        assert_eq!(
            decode(&token, Order::NewestFirst, None).unwrap(),
            key(3, "s3")
        );
        // The last page has no token.
        let (page, token) = merge(
            &query,
            Page {
                headers: vec![h("s1", 1)],
                more: false,
                ..Page::default()
            },
            &[],
        );
        assert_eq!(page.len(), 1);
        assert!(token.is_empty());
    }
}
