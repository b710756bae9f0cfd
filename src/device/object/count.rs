//! A store decorator that counts the requests made through it, for the summaries
//! (`object_store.requests`) and the benchmarks: what a use case costs in round trips.

use super::*;
use async_trait::async_trait;
use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::{
    GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, PutMultipartOptions,
    PutOptions, PutPayload, PutResult, UploadPart,
};

pub(super) static REQUESTS: AtomicU64 = AtomicU64::new(0);

fn one() {
    REQUESTS.fetch_add(1, Relaxed);
}

/// Every request of `inner` counted once: a GET, PUT, HEAD or DELETE, each part of a
/// multipart upload and its completion, each page of a listing.
#[derive(Debug)]
pub(super) struct Counted(pub(super) Arc<dyn ObjectStore>);

impl std::fmt::Display for Counted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

#[derive(Debug)]
struct CountedUpload(Box<dyn MultipartUpload>);

#[async_trait]
impl MultipartUpload for CountedUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        one();
        self.0.put_part(data)
    }
    async fn complete(&mut self) -> object_store::Result<PutResult> {
        one();
        self.0.complete().await
    }
    async fn abort(&mut self) -> object_store::Result<()> {
        one();
        self.0.abort().await
    }
}

/// Pages of a listing: object_store asks for the next page as the stream runs dry, so
/// a page is counted when its first entry arrives (at most 1000 entries a page).
const PAGE: u64 = 1000;

fn counted_list(
    s: BoxStream<'static, object_store::Result<ObjectMeta>>,
) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
    one();
    s.enumerate()
        .map(|(i, m)| {
            if i > 0 && (i as u64).is_multiple_of(PAGE) {
                one();
            }
            m
        })
        .boxed()
}

#[async_trait]
impl ObjectStore for Counted {
    async fn put_opts(
        &self,
        location: &KeyPath,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        one();
        self.0.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &KeyPath,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        one();
        let up = self.0.put_multipart_opts(location, opts).await?;
        Ok(Box::new(CountedUpload(up)))
    }

    async fn get_opts(
        &self,
        location: &KeyPath,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        one();
        self.0.get_opts(location, options).await
    }

    async fn delete(&self, location: &KeyPath) -> object_store::Result<()> {
        one();
        self.0.delete(location).await
    }

    fn list(
        &self,
        prefix: Option<&KeyPath>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        counted_list(self.0.list(prefix))
    }

    fn list_with_offset(
        &self,
        prefix: Option<&KeyPath>,
        offset: &KeyPath,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        counted_list(self.0.list_with_offset(prefix, offset))
    }

    /// S3 and Azure delete up to 1000 objects a request.
    fn delete_stream<'a>(
        &'a self,
        locations: BoxStream<'a, object_store::Result<KeyPath>>,
    ) -> BoxStream<'a, object_store::Result<KeyPath>> {
        let counted = locations
            .enumerate()
            .map(|(i, l)| {
                if (i as u64).is_multiple_of(PAGE) {
                    one();
                }
                l
            })
            .boxed();
        self.0.delete_stream(counted)
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&KeyPath>,
    ) -> object_store::Result<ListResult> {
        one();
        self.0.list_with_delimiter(prefix).await
    }

    async fn copy(&self, from: &KeyPath, to: &KeyPath) -> object_store::Result<()> {
        one();
        self.0.copy(from, to).await
    }

    async fn copy_if_not_exists(&self, from: &KeyPath, to: &KeyPath) -> object_store::Result<()> {
        one();
        self.0.copy_if_not_exists(from, to).await
    }
}
