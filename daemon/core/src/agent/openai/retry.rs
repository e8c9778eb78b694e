//! When to try again: `retry-after` parsing and exponential backoff with jitter.

use std::hash::{BuildHasher, RandomState};
use std::time::{Duration, SystemTime};

use reqwest::header::{HeaderMap, RETRY_AFTER};

/// First wait when the server gives no `retry-after`; doubled per attempt.
const INITIAL_BACKOFF: Duration = Duration::from_millis(500);

/// The wait the server asks for in `retry-after`: delay-seconds (fractions tolerated) or an
/// HTTP-date. A date in the past means "now". Anything unreadable is ignored.
pub(super) fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    if let Ok(seconds) = value.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds).ok();
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(when.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Successive waits between attempts of one request.
#[derive(Debug)]
pub(super) struct Backoff {
    max: Duration,
    retries: u32,
    random: RandomState,
}

impl Backoff {
    pub(super) fn new(max: Duration) -> Self {
        Self {
            max,
            retries: 0,
            random: RandomState::new(),
        }
    }

    /// The wait before the next attempt: the server's `asked` wait when given, else
    /// `INITIAL_BACKOFF * 2^n` with "equal jitter" (half fixed, half random) so that agents
    /// limited at the same moment do not come back in lockstep. Never more than `max`.
    pub(super) fn next_wait(&mut self, asked: Option<Duration>) -> Duration {
        let n = self.retries;
        self.retries = self.retries.saturating_add(1);
        if let Some(asked) = asked {
            return asked.min(self.max);
        }
        let exponential = INITIAL_BACKOFF
            .checked_mul(1_u32.checked_shl(n).unwrap_or(u32::MAX))
            .unwrap_or(Duration::MAX)
            .min(self.max);
        let half = exponential / 2;
        let random = self.random.hash_one(n);
        let span = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX);
        let extra = Duration::from_nanos(random.checked_rem(span.saturating_add(1)).unwrap_or(0));
        (half + extra).min(self.max)
    }
}

#[cfg(test)]
mod tests {
    use reqwest::header::HeaderValue;

    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut map = HeaderMap::new();
        map.insert(RETRY_AFTER, HeaderValue::from_str(value).unwrap());
        map
    }

    #[test]
    fn retry_after_reads_seconds_fractions_and_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(
            retry_after(&headers("0"), now),
            Some(Duration::ZERO),
            "zero seconds"
        );
        assert_eq!(
            retry_after(&headers(" 7 "), now),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            retry_after(&headers("1.5"), now),
            Some(Duration::from_millis(1500))
        );
        let later = httpdate::fmt_http_date(now + Duration::from_secs(42));
        assert_eq!(
            retry_after(&headers(&later), now),
            Some(Duration::from_secs(42))
        );
        let earlier = httpdate::fmt_http_date(now - Duration::from_secs(42));
        assert_eq!(retry_after(&headers(&earlier), now), Some(Duration::ZERO));
        assert_eq!(retry_after(&headers("soon"), now), None);
        assert_eq!(retry_after(&headers("-3"), now), None);
        assert_eq!(retry_after(&HeaderMap::new(), now), None);
    }

    #[test]
    fn backoff_grows_with_jitter_and_is_capped() {
        let mut backoff = Backoff::new(Duration::from_secs(3));
        let first = backoff.next_wait(None);
        assert!(first >= Duration::from_millis(250) && first <= Duration::from_millis(500));
        let second = backoff.next_wait(None);
        assert!(second >= Duration::from_millis(500) && second <= Duration::from_millis(1000));
        for _ in 0..40 {
            assert!(backoff.next_wait(None) <= Duration::from_secs(3));
        }
        assert_eq!(
            backoff.next_wait(Some(Duration::from_secs(3600))),
            Duration::from_secs(3)
        );
        assert_eq!(backoff.next_wait(Some(Duration::ZERO)), Duration::ZERO);
    }
}
