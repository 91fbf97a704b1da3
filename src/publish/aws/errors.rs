//! Error text for the AWS calls: one line for an SDK error (the service's
//! code, message and HTTP status, or the chain of causes) and the joined
//! Display of any error's sources. Errors in, strings out.

/// One line for an SDK error: the service's code and message with the
/// HTTP status, or the chain of causes (connection refused, timeout, DNS).
pub fn explain<E>(e: &aws_sdk_ebs::error::SdkError<E>) -> String
where
    E: aws_sdk_ebs::error::ProvideErrorMetadata + std::error::Error + 'static,
{
    use aws_sdk_ebs::error::SdkError;
    match e {
        SdkError::ServiceError(s) => {
            let status = s.raw().status().as_u16();
            match (s.err().code(), s.err().message()) {
                (Some(c), Some(m)) => format!("{c}: {m} (HTTP {status})"),
                (Some(c), None) => format!("{c} (HTTP {status})"),
                _ => format!("HTTP {status} without an AWS error in the answer"),
            }
        }
        other => chain(other),
    }
}

/// The Display of an error and its sources, joined by `: `, repeats left out.
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cur = Some(e);
    while let Some(x) = cur {
        let s = x.to_string();
        if !s.is_empty() && !parts.iter().any(|p| p.contains(&s)) {
            parts.push(s);
        }
        cur = x.source();
    }
    parts.join(": ")
}
