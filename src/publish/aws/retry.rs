//! Retries with exponential backoff for the EBS direct API calls: which
//! failures are worth another try (throttling, 5xx, dropped connections,
//! timeouts) and how long to wait before it.
use std::future::Future;
use std::time::Duration;

/// How an AWS call failed, as far as retrying is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The service asked us to slow down (HTTP 429, or a throttling code).
    Throttled,
    /// The service failed (HTTP 5xx, or an internal-error code).
    ServerError,
    /// No complete answer: connection reset or refused mid-run, timeout,
    /// truncated response.
    Transient,
    /// Anything else (validation, access denied, missing resource, ...).
    Permanent,
}

impl Failure {
    pub fn retryable(self) -> bool {
        self != Failure::Permanent
    }
}

/// Error codes AWS services use for throttling (the SDKs' standard list).
const THROTTLING_CODES: &[&str] = &[
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottledException",
    "TooManyRequestsException",
    "ProvisionedThroughputExceededException",
    "TransactionInProgressException",
    "RequestLimitExceeded",
    "BandwidthLimitExceeded",
    "LimitExceededException",
    "RequestThrottled",
    "SlowDown",
    "PriorRequestNotComplete",
    "EC2ThrottledException",
];

/// Error codes of transient server-side failures.
const SERVER_CODES: &[&str] = &[
    "InternalError",
    "InternalFailure",
    "InternalServerError",
    "InternalServerException",
    "ServiceUnavailable",
    "ServiceUnavailableException",
    "RequestTimeout",
    "RequestTimeoutException",
];

/// Classify a service answer by HTTP status and error code.
pub fn classify_response(status: u16, code: Option<&str>) -> Failure {
    if status == 429 || code.is_some_and(|c| THROTTLING_CODES.contains(&c)) {
        Failure::Throttled
    } else if status >= 500 || code.is_some_and(|c| SERVER_CODES.contains(&c)) {
        Failure::ServerError
    } else {
        Failure::Permanent
    }
}

/// Classify any SDK error.
pub fn classify<E: aws_sdk_ebs::error::ProvideErrorMetadata>(
    e: &aws_sdk_ebs::error::SdkError<E>,
) -> Failure {
    use aws_sdk_ebs::error::SdkError;
    match e {
        SdkError::ConstructionFailure(_) => Failure::Permanent,
        SdkError::TimeoutError(_) | SdkError::ResponseError(_) => Failure::Transient,
        SdkError::DispatchFailure(d) => {
            if d.is_io() || d.is_timeout() || d.is_other() {
                Failure::Transient
            } else {
                Failure::Permanent
            }
        }
        SdkError::ServiceError(s) => classify_response(s.raw().status().as_u16(), s.err().code()),
        _ => Failure::Permanent,
    }
}

/// Exponential backoff: `base * 2^attempt`, capped, with "equal jitter"
/// (half fixed, half random) so concurrent uploaders spread out.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub base: Duration,
    pub cap: Duration,
    /// Attempts in all, the first included.
    pub attempts: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_millis(250),
            cap: Duration::from_secs(20),
            attempts: 8,
        }
    }
}

impl Backoff {
    /// The wait before retry number `retry` (0 = the first retry), for a
    /// random `r` in [0, 1).
    pub fn delay(&self, retry: u32, r: f64) -> Duration {
        let exp = self
            .base
            .saturating_mul(1u32 << retry.min(20))
            .min(self.cap);
        let half = exp / 2;
        half + half.mul_f64(r.clamp(0.0, 1.0))
    }
}

/// A cheap random number in [0, 1) for jitter (no crypto needed).
fn jitter() -> f64 {
    let n = uuid::Uuid::new_v4().as_u128() as u64;
    (n >> 11) as f64 / (1u64 << 53) as f64
}

/// Run `op` until it succeeds, fails for good, or runs out of attempts;
/// `on_retry` hears each retried failure (for logs and counters).
pub async fn with_retry<T, E, F, Fut>(
    policy: Backoff,
    classify: impl Fn(&E) -> Failure,
    mut on_retry: impl FnMut(&E, Failure, u32),
    mut op: F,
) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let mut retry = 0;
    loop {
        match op().await {
            Ok(v) => return Ok(v),
            Err(e) => {
                let kind = classify(&e);
                if !kind.retryable() || retry + 1 >= policy.attempts {
                    return Err(e);
                }
                on_retry(&e, kind, retry);
                tokio::time::sleep(policy.delay(retry, jitter())).await;
                retry += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn throttling_and_5xx_are_retried_client_errors_are_not() {
        assert_eq!(classify_response(429, None), Failure::Throttled);
        assert_eq!(
            classify_response(400, Some("ThrottlingException")),
            Failure::Throttled
        );
        assert_eq!(
            classify_response(400, Some("RequestThrottledException")),
            Failure::Throttled
        );
        assert_eq!(classify_response(500, None), Failure::ServerError);
        assert_eq!(classify_response(503, None), Failure::ServerError);
        assert_eq!(
            classify_response(400, Some("InternalServerException")),
            Failure::ServerError
        );
        assert_eq!(
            classify_response(400, Some("ValidationException")),
            Failure::Permanent
        );
        assert_eq!(
            classify_response(403, Some("AccessDeniedException")),
            Failure::Permanent
        );
        assert_eq!(classify_response(404, None), Failure::Permanent);
    }

    #[test]
    fn backoff_grows_exponentially_with_jitter_and_cap() {
        let b = Backoff {
            base: Duration::from_millis(100),
            cap: Duration::from_secs(2),
            attempts: 10,
        };
        assert_eq!(b.delay(0, 0.0), Duration::from_millis(50));
        assert_eq!(b.delay(0, 1.0), Duration::from_millis(100));
        assert_eq!(b.delay(1, 0.0), Duration::from_millis(100));
        assert_eq!(b.delay(3, 1.0), Duration::from_millis(800));
        assert_eq!(b.delay(10, 1.0), Duration::from_secs(2));
        assert_eq!(b.delay(40, 0.0), Duration::from_secs(1));
        for _ in 0..100 {
            let j = jitter();
            assert!((0.0..1.0).contains(&j));
        }
    }

    fn fast(attempts: u32) -> Backoff {
        Backoff {
            base: Duration::from_millis(1),
            cap: Duration::from_millis(4),
            attempts,
        }
    }

    #[tokio::test]
    async fn retries_transient_failures_until_success() {
        let calls = AtomicU32::new(0);
        let mut seen = Vec::new();
        let r: Result<u32, Failure> = with_retry(
            fast(5),
            |e: &Failure| *e,
            |_, k, n| seen.push((k, n)),
            || async {
                match calls.fetch_add(1, Ordering::SeqCst) {
                    0 => Err(Failure::Throttled),
                    1 => Err(Failure::ServerError),
                    2 => Err(Failure::Transient),
                    n => Ok(n),
                }
            },
        )
        .await;
        assert_eq!(r, Ok(3));
        assert_eq!(
            seen,
            [
                (Failure::Throttled, 0),
                (Failure::ServerError, 1),
                (Failure::Transient, 2)
            ]
        );
    }

    #[tokio::test]
    async fn permanent_failures_and_exhausted_attempts_stop() {
        let calls = AtomicU32::new(0);
        let r: Result<(), Failure> = with_retry(
            fast(5),
            |e: &Failure| *e,
            |_, _, _| {},
            || async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(Failure::Permanent)
            },
        )
        .await;
        assert_eq!(r, Err(Failure::Permanent));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        let calls = AtomicU32::new(0);
        let r: Result<(), Failure> = with_retry(
            fast(3),
            |e: &Failure| *e,
            |_, _, _| {},
            || async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(Failure::Throttled)
            },
        )
        .await;
        assert_eq!(r, Err(Failure::Throttled));
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }
}
