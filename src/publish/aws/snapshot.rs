//! Upload a disk view as an EBS snapshot through the EBS direct API
//! (StartSnapshot, PutSnapshotBlock per 512 KiB block with its SHA-256,
//! CompleteSnapshot), skipping blocks that are all zeros, several blocks in
//! flight, retried with backoff; then wait until EC2 reports `completed`.
//! A snapshot that does not complete (error, Ctrl-C) is deleted.
use super::calls::{delete_snapshot, snapshot_state, tag};
use super::errors::explain;
use super::retry::{self, Backoff, Failure};
use super::tags::{Tags, TAG_UPLOAD, UPLOAD_COMPLETE};
use crate::io::view::DiskView;
use crate::util::cancel;
use anyhow::{bail, Context, Result};
use aws_sdk_ebs::primitives::ByteStream;
use aws_sdk_ebs::types::ChecksumAlgorithm;
use base64::Engine;
use sha2::{Digest, Sha256};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// EBS snapshot block size: every PutSnapshotBlock carries exactly this
/// many bytes (EBS direct API: BlockSize 524288).
pub const BLOCK_SIZE: u64 = 512 << 10;
/// GiB, the unit of EBS volume sizes.
pub const GIB: u64 = 1 << 30;
/// PutSnapshotBlock requests in flight per snapshot.
pub const IN_FLIGHT: usize = 16;
/// StartSnapshot `Timeout` (minutes): AWS moves a snapshot still pending
/// after this to `error`, so a crashed run leaves nothing pending forever.
const START_TIMEOUT_MINUTES: i32 = 60;
/// How long to wait for a completed upload to become `completed`.
const COMPLETE_WAIT: Duration = Duration::from_secs(60 * 60);
const COMPLETE_POLL: Duration = Duration::from_secs(2);

/// Volume size in GiB for a disk of `len` bytes (rounded up).
pub fn volume_gib(len: u64) -> u64 {
    len.div_ceil(GIB).max(1)
}

/// Indices of the blocks that may hold data: every block an extent
/// touches, sorted and unique. The others are holes and are never read.
pub fn candidate_blocks(extents: &[Range<u64>], len: u64) -> Vec<u64> {
    let mut v: Vec<u64> = Vec::new();
    for r in extents {
        let (start, end) = (r.start, r.end.min(len));
        if start >= end {
            continue;
        }
        let first = start / BLOCK_SIZE;
        let last = (end - 1) / BLOCK_SIZE;
        let from = match v.last() {
            Some(&l) if l >= first => l + 1,
            _ => first,
        };
        v.extend(from..=last);
    }
    v
}

/// Base64 SHA-256 of a block: PutSnapshotBlock's `Checksum`.
pub fn block_checksum(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(Sha256::digest(data))
}

/// What an upload did, for the report and the tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UploadStats {
    /// Blocks of the volume (volume size / 512 KiB).
    pub blocks_total: u64,
    /// Blocks sent with PutSnapshotBlock.
    pub blocks_sent: u64,
    /// Blocks inside data extents that were all zeros (read, not sent).
    pub zero_blocks_read: u64,
    /// Bytes sent.
    pub bytes_sent: u64,
    /// PutSnapshotBlock calls retried.
    pub retries: u64,
    pub seconds_millis: u64,
}

/// The clients and names one snapshot upload needs.
pub struct Uploader<'a> {
    pub ebs: &'a aws_sdk_ebs::Client,
    pub ec2: &'a super::ec2::Client,
    pub region: &'a str,
    pub description: String,
    pub tags: &'a Tags,
    pub backoff: Backoff,
}

fn ebs_tags(tags: &Tags) -> Vec<aws_sdk_ebs::types::Tag> {
    tags.iter()
        .map(|(k, v)| aws_sdk_ebs::types::Tag::builder().key(k).value(v).build())
        .collect()
}

/// Resolves once a signal has arrived.
pub async fn cancelled() {
    while cancel::pending().is_none() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// For interrupt tests: with `$BOOTIMAGE_GEN_PAUSE_AT=aws-upload`, wait
/// here (the snapshot started, some blocks sent) until a signal arrives.
async fn pause_point(point: &str) {
    if std::env::var(cancel::PAUSE_ENV).is_ok_and(|p| p == point) {
        eprintln!("bootimage-gen: paused at {point}");
        cancelled().await;
    }
}

impl Uploader<'_> {
    /// Upload `view` as a new snapshot, wait until it is `completed`, and
    /// mark it complete with a tag. On any failure or a signal the new
    /// snapshot is deleted before the error is returned.
    pub async fn upload(
        &self,
        view: &dyn DiskView,
        progress: &(dyn Fn(u64, u64) + Sync),
    ) -> Result<(String, UploadStats)> {
        let gib = volume_gib(view.len());
        let token = uuid::Uuid::new_v4().to_string();
        let tags = ebs_tags(self.tags);
        let started = retry::with_retry(
            self.backoff,
            retry::classify,
            |e, k, n| log_retry("StartSnapshot", self.region, e, k, n),
            || {
                self.ebs
                    .start_snapshot()
                    .volume_size(gib as i64)
                    .description(&self.description)
                    .set_tags(Some(tags.clone()))
                    .timeout(START_TIMEOUT_MINUTES)
                    .client_token(&token)
                    .send()
            },
        )
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "starting an EBS snapshot of {gib} GiB in {}: {}",
                self.region,
                explain(&e)
            )
        })?;
        let id = started
            .snapshot_id()
            .context("StartSnapshot answered without a snapshot id")?
            .to_string();
        tracing::info!("started snapshot {id} in {}", self.region);
        let work = async {
            let stats = self.put_blocks(&id, view, progress).await?;
            self.complete(&id, stats.blocks_sent).await?;
            Ok::<_, anyhow::Error>(stats)
        };
        let res = tokio::select! {
            r = work => r,
            _ = cancelled() => Err(cancel::check().expect_err("a signal arrived")),
        };
        match res {
            Ok(stats) => Ok((id, stats)),
            Err(e) => {
                self.delete(&id).await;
                Err(e)
            }
        }
    }

    /// Send every non-zero block, [`IN_FLIGHT`] at a time.
    async fn put_blocks(
        &self,
        id: &str,
        view: &dyn DiskView,
        progress: &(dyn Fn(u64, u64) + Sync),
    ) -> Result<UploadStats> {
        let t0 = Instant::now();
        let len = view.len();
        let extents = view
            .data_extents()
            .context("mapping the data of the aws disk")?;
        let blocks = candidate_blocks(&extents, len);
        let total_blocks = volume_gib(len) * GIB / BLOCK_SIZE;
        let retries = Arc::new(AtomicU64::new(0));
        let mut stats = UploadStats {
            blocks_total: total_blocks,
            ..Default::default()
        };
        let mut set: tokio::task::JoinSet<Result<u64>> = tokio::task::JoinSet::new();
        let candidates = blocks.len() as u64;
        let mut done = 0u64;
        for (n, &index) in blocks.iter().enumerate() {
            if n == IN_FLIGHT {
                pause_point("aws-upload").await;
            }
            cancel::check()?;
            let mut buf = vec![0u8; BLOCK_SIZE as usize];
            let at = index * BLOCK_SIZE;
            let want = (len - at).min(BLOCK_SIZE) as usize;
            view.read_at(&mut buf[..want], at)
                .with_context(|| format!("reading block {index} of the aws disk"))?;
            if buf.iter().all(|&b| b == 0) {
                stats.zero_blocks_read += 1;
                done += 1;
                progress(done, candidates);
                continue;
            }
            while set.len() >= IN_FLIGHT {
                let r = set.join_next().await.context("an upload task")?;
                let sent = r.context("an upload task")??;
                stats.blocks_sent += 1;
                stats.bytes_sent += sent;
                done += 1;
                progress(done, candidates);
            }
            let ebs = self.ebs.clone();
            let (id, region, backoff) = (id.to_string(), self.region.to_string(), self.backoff);
            let retries = retries.clone();
            set.spawn(
                async move { put_block(&ebs, &id, &region, index, buf, backoff, &retries).await },
            );
        }
        while let Some(r) = set.join_next().await {
            stats.bytes_sent += r.context("an upload task")??;
            stats.blocks_sent += 1;
            done += 1;
            progress(done, candidates);
        }
        stats.retries = retries.load(Ordering::Relaxed);
        stats.seconds_millis = t0.elapsed().as_millis() as u64;
        Ok(stats)
    }

    /// CompleteSnapshot, wait for `completed`, then tag it complete.
    async fn complete(&self, id: &str, sent: u64) -> Result<()> {
        let out = retry::with_retry(
            self.backoff,
            retry::classify,
            |e, k, n| log_retry("CompleteSnapshot", self.region, e, k, n),
            || {
                self.ebs
                    .complete_snapshot()
                    .snapshot_id(id)
                    .changed_blocks_count(sent as i32)
                    .send()
            },
        )
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "completing snapshot {id} in {}: {}",
                self.region,
                explain(&e)
            )
        })?;
        if let Some(s) = out.status() {
            if s.as_str() == "error" {
                bail!("snapshot {id} in {} failed to complete (status error); it is deleted, run again", self.region);
            }
        }
        let deadline = Instant::now() + COMPLETE_WAIT;
        loop {
            let state = snapshot_state(self.ec2, id)
                .await
                .with_context(|| format!("waiting for snapshot {id} in {}", self.region))?;
            match state.as_deref() {
                Some("completed") => break,
                Some("error") => bail!(
                    "snapshot {id} in {} went to state error after CompleteSnapshot",
                    self.region
                ),
                _ if Instant::now() > deadline => bail!(
                    "snapshot {id} in {} not completed after {} minutes",
                    self.region,
                    COMPLETE_WAIT.as_secs() / 60
                ),
                _ => tokio::time::sleep(COMPLETE_POLL).await,
            }
        }
        tag(
            self.ec2,
            id,
            &[(TAG_UPLOAD.to_string(), UPLOAD_COMPLETE.into())],
        )
        .await
        .with_context(|| format!("tagging snapshot {id} in {} complete", self.region))
    }

    /// Best effort: delete the unfinished snapshot `id`, and say so.
    async fn delete(&self, id: &str) {
        match delete_snapshot(self.ec2, id).await {
            Ok(()) => eprintln!(
                "bootimage-gen: deleted unfinished snapshot {id} in {}",
                self.region
            ),
            Err(e) => eprintln!(
                "bootimage-gen: could not delete unfinished snapshot {id} in {} ({e:#}); the next run deletes it",
                self.region
            ),
        }
    }
}

fn log_retry<E>(what: &str, region: &str, e: &aws_sdk_ebs::error::SdkError<E>, k: Failure, n: u32)
where
    E: aws_sdk_ebs::error::ProvideErrorMetadata + std::error::Error + 'static,
{
    tracing::warn!(
        "{what} in {region}: {k:?} ({}); retry {}",
        explain(e),
        n + 1
    );
}

/// PutSnapshotBlock for one block, with its SHA-256; returns bytes sent.
async fn put_block(
    ebs: &aws_sdk_ebs::Client,
    id: &str,
    region: &str,
    index: u64,
    data: Vec<u8>,
    backoff: Backoff,
    retries: &AtomicU64,
) -> Result<u64> {
    let checksum = block_checksum(&data);
    let data = bytes_of(data);
    let n = data.len() as u64;
    retry::with_retry(
        backoff,
        retry::classify,
        |e, k, r| {
            retries.fetch_add(1, Ordering::Relaxed);
            log_retry(&format!("PutSnapshotBlock {index}"), region, e, k, r)
        },
        || {
            ebs.put_snapshot_block()
                .snapshot_id(id)
                .block_index(index as i32)
                .data_length(BLOCK_SIZE as i32)
                .checksum(&checksum)
                .checksum_algorithm(ChecksumAlgorithm::ChecksumAlgorithmSha256)
                .block_data(ByteStream::from(data.clone()))
                .send()
        },
    )
    .await
    .map_err(|e| {
        anyhow::anyhow!(
            "sending block {index} of snapshot {id} in {region}: {}",
            explain(&e)
        )
    })?;
    Ok(n)
}

/// The block as a cheaply clonable buffer (retries resend it).
fn bytes_of(v: Vec<u8>) -> bytes::Bytes {
    bytes::Bytes::from(v)
}

#[cfg(test)]
mod tests;
