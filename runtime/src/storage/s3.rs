//! S3 store (aws-sdk-s3). To be implemented: see the storage trait in `mod.rs`.

use super::*;

/// A store on one S3 bucket under an optional key prefix.
#[derive(Debug, Clone)]
pub struct S3Store {
    bucket: String,
    prefix: String,
}

impl S3Store {
    /// Connects with the default credential chain and `opts`.
    pub async fn connect(bucket: &str, prefix: &str, opts: &S3Options) -> Result<S3Store> {
        let _ = opts;
        Err(StorageError::InvalidUrl(
            format!("s3://{bucket}/{prefix}"),
            "S3 support is not built yet".into(),
        ))
    }
}

#[async_trait]
impl ObjectStore for S3Store {
    fn url(&self, path: &str) -> String {
        format!("s3://{}/{}", self.bucket, join(&self.prefix, path))
    }
    async fn put(&self, path: &str, _data: Bytes) -> Result<()> {
        Err(StorageError::NotFound(self.url(path)))
    }
    async fn put_if_absent(&self, path: &str, _data: Bytes) -> Result<PutOutcome> {
        Err(StorageError::NotFound(self.url(path)))
    }
    async fn get(&self, path: &str) -> Result<Bytes> {
        Err(StorageError::NotFound(self.url(path)))
    }
    async fn get_from(&self, path: &str, _offset: u64) -> Result<Bytes> {
        Err(StorageError::NotFound(self.url(path)))
    }
    async fn exists(&self, _path: &str) -> Result<bool> {
        Ok(false)
    }
    async fn list(&self, _prefix: &str) -> Result<Vec<ObjectMeta>> {
        Ok(vec![])
    }
    async fn delete(&self, _path: &str) -> Result<()> {
        Ok(())
    }
    async fn create_multipart(&self, path: &str) -> Result<MultipartUpload> {
        Err(StorageError::NotFound(self.url(path)))
    }
    async fn upload_part(&self, upload: &mut MultipartUpload, _data: Bytes) -> Result<()> {
        Err(StorageError::NotFound(self.url(&upload.path)))
    }
    async fn complete_multipart(&self, upload: &MultipartUpload) -> Result<()> {
        Err(StorageError::NotFound(self.url(&upload.path)))
    }
    async fn abort_multipart(&self, _upload: &MultipartUpload) -> Result<()> {
        Ok(())
    }
}
