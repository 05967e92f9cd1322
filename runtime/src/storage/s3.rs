//! S3 store on aws-sdk-s3. Works against AWS S3 and S3-compatible servers (MinIO, Ceph,
//! moto) through [`S3Options`].
//!
//! Object keys are `join(prefix, path)`. Conditional creates use `If-None-Match: *`; whole-object
//! writes are atomic by S3's semantics; multipart uploads stay invisible until completed.

use super::*;
use aws_config::BehaviorVersion;
use aws_sdk_s3::Client;
use aws_sdk_s3::config::Region;
use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart, Delete, ObjectIdentifier};

/// Region used when neither [`S3Options::region`], the environment nor the AWS profile names
/// one.
const DEFAULT_REGION: &str = "us-east-1";

/// Most keys one `DeleteObjects` request may name.
const DELETE_BATCH: usize = 1000;

/// Environment variable that enables path-style addressing (`true` or `1`).
pub const PATH_STYLE_ENV: &str = "WEIR_S3_PATH_STYLE";

/// Objects larger than this are written by [`ObjectStore::put`] as a multipart upload.
pub const MULTIPART_THRESHOLD: usize = 16 * 1024 * 1024;
/// Part size of those uploads.
pub const MULTIPART_PART_SIZE: usize = 8 * 1024 * 1024;
/// Parts of one large `put` uploading at once (each on its own connection).
const PARTS_AT_ONCE: usize = 4;

/// A store on one S3 bucket under an optional key prefix.
#[derive(Debug, Clone)]
pub struct S3Store {
    client: Client,
    bucket: String,
    prefix: String,
    /// The endpoint requests go to, for error messages (`None`: AWS S3, or not known).
    endpoint: Option<String>,
}

impl S3Store {
    /// GetObject of `path`: the response, whose body the caller reads. Errors:
    /// `StorageError::NotFound` (naming the URL) when there is no such object; the request's
    /// error otherwise.
    async fn get_object(&self, path: &str) -> Result<aws_sdk_s3::operation::get_object::GetObjectOutput> {
        self.client
            .get_object()
            .bucket(&self.bucket)
            .key(self.key(path))
            .send()
            .await
            .map_err(|e| {
                if e.as_service_error().is_some_and(|s| s.is_no_such_key()) || status(&e) == Some(404) {
                    StorageError::NotFound(self.url(path))
                } else {
                    self.err(path, "GetObject", e)
                }
            })
    }
    /// Connects with the default credential chain and `opts`: `opts.endpoint` overrides the
    /// endpoint (otherwise `AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL` as aws-config reads them),
    /// `opts.region` the region (otherwise `AWS_REGION`, the AWS profile, in a Kubernetes pod the
    /// instance metadata service, then `us-east-1`), and path-style
    /// addressing is on when `opts.path_style` or `WEIR_S3_PATH_STYLE=true`.
    ///
    /// No request is made here: bad credentials or a missing bucket surface on first use.
    pub async fn connect(bucket: &str, prefix: &str, opts: &S3Options) -> Result<S3Store> {
        if bucket.is_empty() {
            return Err(StorageError::InvalidUrl(
                format!("s3://{bucket}/{prefix}"),
                "no bucket name".into(),
            ));
        }
        // The region: `opts.region`, else `AWS_REGION` / `AWS_DEFAULT_REGION`, else the AWS
        // profile's, else (in a Kubernetes pod only) the instance metadata service (IMDS), else
        // us-east-1. Off a cloud node IMDS answers with a refusal or a timeout and the SDK logs
        // warnings on every command (`weir checkpoints list s3://…` on a laptop), so it is asked
        // only where a pod on EKS without IRSA or `spec.s3.region` needs it, as before.
        use aws_config::meta::region::RegionProviderChain;
        let region = RegionProviderChain::first_try(opts.region.clone().filter(|r| !r.is_empty()).map(Region::new))
            .or_else(
                ["AWS_REGION", "AWS_DEFAULT_REGION"]
                    .iter()
                    .find_map(|v| std::env::var(v).ok().filter(|r| !r.trim().is_empty()))
                    .map(Region::new),
            )
            .or_else(aws_config::profile::ProfileFileRegionProvider::new());
        let in_pod = std::env::var_os("KUBERNETES_SERVICE_HOST").is_some();
        let imds_disabled = std::env::var("AWS_EC2_METADATA_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true"));
        let region = if in_pod && !imds_disabled {
            region.or_else(aws_config::imds::region::ImdsRegionProvider::builder().build())
        } else {
            region
        }
        .or_else(Region::from_static(DEFAULT_REGION));
        let sdk = aws_config::defaults(BehaviorVersion::latest())
            .region(region)
            .load()
            .await;
        let mut conf = aws_sdk_s3::config::Builder::from(&sdk);
        if let Some(endpoint) = opts.endpoint.as_deref().filter(|e| !e.is_empty()) {
            conf = conf.endpoint_url(endpoint);
        }
        conf = conf.force_path_style(opts.path_style || path_style_from_env());
        if let Some(c) = &opts.credentials {
            conf = conf.credentials_provider(aws_sdk_s3::config::Credentials::new(
                c.access_key_id.clone(),
                c.secret_access_key.clone(),
                c.session_token.clone(),
                None,
                "weir-static",
            ));
        }
        let endpoint = opts
            .endpoint
            .clone()
            .filter(|e| !e.is_empty())
            .or_else(|| std::env::var("AWS_ENDPOINT_URL_S3").ok())
            .or_else(|| std::env::var("AWS_ENDPOINT_URL").ok());
        Ok(S3Store {
            endpoint,
            ..S3Store::from_client(Client::from_conf(conf.build()), bucket, prefix)
        })
    }

    /// A store using an already configured client (for embedding and tests).
    pub fn from_client(client: Client, bucket: &str, prefix: &str) -> S3Store {
        S3Store {
            client,
            bucket: bucket.to_string(),
            prefix: prefix.trim_matches('/').to_string(),
            endpoint: None,
        }
    }

    /// The bucket this store writes to.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The key prefix (without surrounding `/`) every path is placed under.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn key(&self, path: &str) -> String {
        join(&self.prefix, path)
    }

    /// The key prefix that `list(prefix)` asks S3 for: the store prefix always ends in `/`
    /// so that a store on `a` never sees keys of a sibling `ab/...`.
    fn list_key_prefix(&self, prefix: &str) -> String {
        if self.prefix.is_empty() {
            prefix.to_string()
        } else {
            format!("{}/{}", self.prefix, prefix)
        }
    }

    /// Maps a full key back to a store-relative path.
    fn relative<'a>(&self, key: &'a str) -> Option<&'a str> {
        if self.prefix.is_empty() {
            Some(key)
        } else {
            key.strip_prefix(self.prefix.as_str()).and_then(|k| k.strip_prefix('/'))
        }
    }

    fn err<E>(&self, path: &str, op: &'static str, err: SdkError<E, HttpResponse>) -> StorageError
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        let mut message = DisplayErrorContext(&err).to_string();
        if matches!(err, SdkError::DispatchFailure(_)) {
            message.push_str(&no_answer_hint(self.endpoint.as_deref()));
        }
        StorageError::S3 {
            path: self.url(path),
            op,
            message,
        }
    }

    /// Lists full keys and sizes under `prefix` (store-relative), following continuation tokens.
    async fn list_raw(&self, prefix: &str) -> Result<Vec<(String, u64)>> {
        let mut out = Vec::new();
        self.list_pages(prefix, None, |page| {
            for obj in page.contents() {
                if let Some(key) = obj.key() {
                    out.push((key.to_string(), obj.size().unwrap_or(0).max(0) as u64));
                }
            }
        })
        .await?;
        Ok(out)
    }

    /// Every page of `ListObjectsV2` under `prefix` (with `delimiter` when given), following
    /// continuation tokens, each passed to `each_page`. Errors: the first failed request.
    async fn list_pages(
        &self,
        prefix: &str,
        delimiter: Option<&str>,
        mut each_page: impl FnMut(&aws_sdk_s3::operation::list_objects_v2::ListObjectsV2Output),
    ) -> Result<()> {
        let key_prefix = self.list_key_prefix(prefix);
        let mut token: Option<String> = None;
        loop {
            let page = self
                .client
                .list_objects_v2()
                .bucket(&self.bucket)
                .prefix(&key_prefix)
                .set_delimiter(delimiter.map(str::to_string))
                .set_continuation_token(token.take())
                .send()
                .await
                .map_err(|e| self.err(prefix, "ListObjectsV2", e))?;
            each_page(&page);
            match page.next_continuation_token() {
                Some(t) if page.is_truncated().unwrap_or(false) && !t.is_empty() => token = Some(t.to_string()),
                _ => return Ok(()),
            }
        }
    }

    async fn read_body(&self, path: &str, body: ByteStream) -> Result<Bytes> {
        body.collect()
            .await
            .map(|d| d.into_bytes())
            .map_err(|e| StorageError::S3 {
                path: self.url(path),
                op: "GetObject",
                message: format!("reading the response body: {}", DisplayErrorContext(&e)),
            })
    }
}

type HttpResponse = aws_sdk_s3::config::http::HttpResponse;

/// What to check when a request to `endpoint` (`None`: AWS S3) got no answer: the endpoint a
/// job sets in `spec.s3.endpoint` is not known to the command-line tools, which read
/// `AWS_ENDPOINT_URL` (and `WEIR_S3_PATH_STYLE`) like the AWS CLI.
fn no_answer_hint(endpoint: Option<&str>) -> String {
    let target = match endpoint {
        Some(e) => format!("the S3 endpoint {e}"),
        None => "AWS S3 (no endpoint is set)".into(),
    };
    format!(
        "; nothing answered at {target}: for MinIO, Ceph or moto set the endpoint (`spec.s3.endpoint` in a \
         job; `AWS_ENDPOINT_URL` and `{PATH_STYLE_ENV}=true` for `weir checkpoints list`, `weir savepoint \
         inspect` and `weir list --storage`) and check it is reachable"
    )
}

fn path_style_from_env() -> bool {
    std::env::var(PATH_STYLE_ENV).is_ok_and(|v| {
        let v = v.trim();
        v.eq_ignore_ascii_case("true") || v == "1"
    })
}

/// HTTP status of a failed request, when the service answered.
fn status<E>(err: &SdkError<E, HttpResponse>) -> Option<u16> {
    err.raw_response().map(|r| r.status().as_u16())
}

/// Error code of a failed request (`NoSuchKey`, `PreconditionFailed`, ...), when there is one.
fn code<E: ProvideErrorMetadata>(err: &SdkError<E, HttpResponse>) -> Option<&str> {
    err.code()
}

#[async_trait]
impl ObjectStore for S3Store {
    fn url(&self, path: &str) -> String {
        format!("s3://{}/{}", self.bucket, self.key(path))
    }

    async fn put(&self, path: &str, data: Bytes) -> Result<()> {
        if data.len() > MULTIPART_THRESHOLD {
            // Large state files go up as a multipart upload of MIN_PART_SIZE-or-larger parts;
            // the object appears at once on completion, as with a single PUT.
            // Up to PARTS_AT_ONCE parts upload at once (as a checkpoint's state files do).
            use futures::{StreamExt, TryStreamExt};
            let mut upload = self.create_multipart(path).await?;
            let target = upload.clone();
            let chunks: Vec<Bytes> = data.chunks(MULTIPART_PART_SIZE).map(|c| data.slice_ref(c)).collect();
            let parts = chunks
                .into_iter()
                .zip(1..)
                .map(|(part, number)| self.upload_part_at(&target, number, 0, part));
            match futures::stream::iter(parts)
                .buffered(PARTS_AT_ONCE)
                .try_collect::<Vec<_>>()
                .await
            {
                Ok(tokens) => upload.parts = (1..).zip(tokens).collect(),
                Err(e) => {
                    let _ = self.abort_multipart(&upload).await;
                    return Err(e);
                }
            }
            return self.complete_multipart(&upload).await;
        }
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(self.key(path))
            .body(ByteStream::from(data))
            .send()
            .await
            .map_err(|e| self.err(path, "PutObject", e))?;
        Ok(())
    }

    async fn put_file(&self, path: &str, local: &std::path::Path) -> Result<()> {
        let unreadable = |e: std::io::Error| StorageError::Io {
            path: local.display().to_string(),
            source: e,
        };
        let size = tokio::fs::metadata(local).await.map_err(unreadable)?.len();
        if size > MULTIPART_THRESHOLD as u64 {
            let data = tokio::fs::read(local).await.map_err(unreadable)?;
            return self.put(path, Bytes::from(data)).await;
        }
        // Streamed from the file (re-read from its start if the request is retried).
        let body = ByteStream::read_from()
            .path(local)
            .buffer_size(1 << 20)
            .build()
            .await
            .map_err(|e| unreadable(std::io::Error::other(e)))?;
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(self.key(path))
            .body(body)
            .send()
            .await
            .map_err(|e| self.err(path, "PutObject", e))?;
        Ok(())
    }

    async fn put_if_absent(&self, path: &str, data: Bytes) -> Result<PutOutcome> {
        let res = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(self.key(path))
            .if_none_match("*")
            .body(ByteStream::from(data))
            .send()
            .await;
        match res {
            Ok(_) => Ok(PutOutcome::Created),
            // 412: an object exists. 409: a concurrent conditional write to the same key is in
            // flight; one of the writers wins, so from this caller's view the object exists.
            Err(e)
                if matches!(status(&e), Some(412 | 409))
                    || matches!(code(&e), Some("PreconditionFailed" | "ConditionalRequestConflict")) =>
            {
                Ok(PutOutcome::AlreadyExists)
            }
            Err(e) => Err(self.err(path, "PutObject", e)),
        }
    }

    async fn get(&self, path: &str) -> Result<Bytes> {
        let resp = self.get_object(path).await?;
        self.read_body(path, resp.body).await
    }

    async fn get_stream(&self, path: &str) -> Result<ByteChunks> {
        let resp = self.get_object(path).await?;
        let url = self.url(path);
        // The response body, chunk by chunk as the connection delivers it.
        Ok(Box::pin(futures::stream::unfold(Some(resp.body), move |body| {
            let url = url.clone();
            async move {
                let mut body = body?;
                match body.next().await? {
                    Ok(chunk) => Some((Ok(chunk), Some(body))),
                    Err(e) => Some((
                        Err(StorageError::S3 {
                            path: url,
                            op: "GetObject",
                            message: format!("reading the response body: {}", DisplayErrorContext(&e)),
                        }),
                        None,
                    )),
                }
            }
        })))
    }

    async fn get_from(&self, path: &str, offset: u64) -> Result<Bytes> {
        if offset == 0 {
            return self.get(path).await;
        }
        let res = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(self.key(path))
            .range(format!("bytes={offset}-"))
            .send()
            .await;
        match res {
            Ok(resp) => self.read_body(path, resp.body).await,
            Err(e) if e.as_service_error().is_some_and(|s| s.is_no_such_key()) || status(&e) == Some(404) => {
                Err(StorageError::NotFound(self.url(path)))
            }
            // The object exists but the range starts at or past its end: nothing to read.
            Err(e) if status(&e) == Some(416) || code(&e) == Some("InvalidRange") => Ok(Bytes::new()),
            Err(e) => Err(self.err(path, "GetObject", e)),
        }
    }

    async fn exists(&self, path: &str) -> Result<bool> {
        match self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(self.key(path))
            .send()
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if e.as_service_error().is_some_and(|s| s.is_not_found()) || status(&e) == Some(404) => Ok(false),
            Err(e) => Err(self.err(path, "HeadObject", e)),
        }
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        let mut out: Vec<ObjectMeta> = self
            .list_raw(prefix)
            .await?
            .into_iter()
            .filter_map(|(key, size)| {
                self.relative(&key).map(|p| ObjectMeta {
                    path: p.to_string(),
                    size,
                })
            })
            .collect();
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    /// With S3's `/` delimiter: one request per 1,000 directories, however many objects they
    /// hold (the default lists every object under `prefix`: a job's `shared/` alone can hold
    /// thousands).
    async fn list_directories(&self, prefix: &str) -> Result<Vec<String>> {
        let key_prefix = self.list_key_prefix(prefix);
        let mut names = Vec::new();
        self.list_pages(prefix, Some("/"), |page| {
            for common in page.common_prefixes() {
                if let Some(name) = common.prefix().and_then(|p| p.strip_prefix(key_prefix.as_str())) {
                    let name = name.trim_end_matches('/');
                    if !name.is_empty() {
                        names.push(name.to_string());
                    }
                }
            }
        })
        .await?;
        names.sort();
        names.dedup();
        Ok(names)
    }

    async fn delete(&self, path: &str) -> Result<()> {
        match self
            .client
            .delete_object()
            .bucket(&self.bucket)
            .key(self.key(path))
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if status(&e) == Some(404) => Ok(()),
            Err(e) => Err(self.err(path, "DeleteObject", e)),
        }
    }

    async fn delete_prefix(&self, prefix: &str) -> Result<()> {
        let keys = self.list_raw(prefix).await?;
        for batch in keys.chunks(DELETE_BATCH) {
            let objects = batch
                .iter()
                .map(|(key, _)| ObjectIdentifier::builder().key(key).build())
                .collect::<std::result::Result<Vec<_>, _>>()
                .and_then(|objects| Delete::builder().set_objects(Some(objects)).quiet(true).build())
                .map_err(|e| StorageError::S3 {
                    path: self.url(prefix),
                    op: "DeleteObjects",
                    message: DisplayErrorContext(&e).to_string(),
                })?;
            let resp = self
                .client
                .delete_objects()
                .bucket(&self.bucket)
                .delete(objects)
                .send()
                .await
                .map_err(|e| self.err(prefix, "DeleteObjects", e))?;
            // Per-key failures come back in a 200 response; a key that is already gone is fine.
            let failed: Vec<String> = resp
                .errors()
                .iter()
                .filter(|e| e.code() != Some("NoSuchKey"))
                .map(|e| {
                    format!(
                        "{}: {} ({})",
                        e.key().unwrap_or("?"),
                        e.code().unwrap_or("unknown error"),
                        e.message().unwrap_or("no message")
                    )
                })
                .collect();
            if !failed.is_empty() {
                return Err(StorageError::S3 {
                    path: self.url(prefix),
                    op: "DeleteObjects",
                    message: format!(
                        "{} of {} keys not deleted: {}",
                        failed.len(),
                        batch.len(),
                        failed.join("; ")
                    ),
                });
            }
        }
        Ok(())
    }

    async fn create_multipart(&self, path: &str) -> Result<MultipartUpload> {
        let resp = self
            .client
            .create_multipart_upload()
            .bucket(&self.bucket)
            .key(self.key(path))
            .send()
            .await
            .map_err(|e| self.err(path, "CreateMultipartUpload", e))?;
        let upload_id = resp
            .upload_id()
            .filter(|id| !id.is_empty())
            .ok_or_else(|| StorageError::S3 {
                path: self.url(path),
                op: "CreateMultipartUpload",
                message: "the response has no upload id".into(),
            })?;
        Ok(MultipartUpload {
            path: path.to_string(),
            upload_id: upload_id.to_string(),
            parts: Vec::new(),
        })
    }

    async fn upload_part(&self, upload: &mut MultipartUpload, data: Bytes) -> Result<()> {
        let number = upload.parts.last().map_or(0, |(n, _)| *n) + 1;
        let etag = self.upload_part_at(upload, number, 0, data).await?;
        upload.parts.push((number, etag));
        Ok(())
    }

    async fn upload_part_at(&self, upload: &MultipartUpload, number: i32, _offset: u64, data: Bytes) -> Result<String> {
        let resp = self
            .client
            .upload_part()
            .bucket(&self.bucket)
            .key(self.key(&upload.path))
            .upload_id(&upload.upload_id)
            .part_number(number)
            .body(ByteStream::from(data))
            .send()
            .await
            .map_err(|e| self.err(&upload.path, "UploadPart", e))?;
        let etag = resp.e_tag().filter(|t| !t.is_empty()).ok_or_else(|| StorageError::S3 {
            path: self.url(&upload.path),
            op: "UploadPart",
            message: format!("the response for part {number} has no ETag"),
        })?;
        Ok(etag.to_string())
    }

    async fn complete_multipart(&self, upload: &MultipartUpload) -> Result<()> {
        if upload.parts.is_empty() {
            // S3 rejects completing an upload without parts; the result would be an empty
            // object, so write that directly and drop the upload.
            self.put(&upload.path, Bytes::new()).await?;
            return self.abort_multipart(upload).await;
        }
        let parts = upload
            .parts
            .iter()
            .map(|(number, etag)| CompletedPart::builder().part_number(*number).e_tag(etag).build())
            .collect();
        let res = self
            .client
            .complete_multipart_upload()
            .bucket(&self.bucket)
            .key(self.key(&upload.path))
            .upload_id(&upload.upload_id)
            .multipart_upload(CompletedMultipartUpload::builder().set_parts(Some(parts)).build())
            .send()
            .await;
        match res {
            Ok(_) => Ok(()),
            Err(e) if code(&e) == Some("NoSuchUpload") || status(&e) == Some(404) => {
                // Completed before (e.g. by a run that crashed before recording it): Ok if the
                // object is there.
                if self.exists(&upload.path).await? {
                    Ok(())
                } else {
                    Err(StorageError::NotFound(format!(
                        "{} (multipart upload {})",
                        self.url(&upload.path),
                        upload.upload_id
                    )))
                }
            }
            Err(e) => Err(self.err(&upload.path, "CompleteMultipartUpload", e)),
        }
    }

    async fn abort_multipart(&self, upload: &MultipartUpload) -> Result<()> {
        let res = self
            .client
            .abort_multipart_upload()
            .bucket(&self.bucket)
            .key(self.key(&upload.path))
            .upload_id(&upload.upload_id)
            .send()
            .await;
        match res {
            Ok(_) => Ok(()),
            Err(e) if e.as_service_error().is_some_and(|s| s.is_no_such_upload()) || status(&e) == Some(404) => Ok(()),
            Err(e) => Err(self.err(&upload.path, "AbortMultipartUpload", e)),
        }
    }
}
