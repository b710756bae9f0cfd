// Test helper: administers the S3 (MinIO) and Azure Blob (Azurite) servers the tests
// start, with the vendors' own SDKs, for what pagevault itself never does
// (create buckets, list incomplete uploads, damage objects).
// Usage: node store.js s3|azure COMMAND BUCKET [KEY] [ARG]
//   mkbucket B | ls B [PREFIX] | uploads B | rm B KEY | truncate B KEY BYTES | flip B KEY OFFSET
//   | sha B KEY OFFSET (SHA-256 of the bytes from OFFSET, hex)
// Environment: AWS_* (with AWS_ENDPOINT_URL), AZURE_STORAGE_CONNECTION_STRING.
const [kind, cmd, bucket, key, arg] = process.argv.slice(2);

async function s3() {
  const s = require('@aws-sdk/client-s3');
  const c = new s.S3Client({
    endpoint: process.env.AWS_ENDPOINT_URL,
    region: process.env.AWS_REGION || 'us-east-1',
    forcePathStyle: true,
  });
  switch (cmd) {
    case 'mkbucket':
      await c.send(new s.CreateBucketCommand({ Bucket: bucket }));
      return;
    case 'ls': {
      let token;
      do {
        const r = await c.send(new s.ListObjectsV2Command({ Bucket: bucket, Prefix: key || undefined, ContinuationToken: token }));
        for (const o of r.Contents || []) console.log(`${o.Key}\t${o.Size}`);
        token = r.IsTruncated ? r.NextContinuationToken : undefined;
      } while (token);
      return;
    }
    case 'uploads': {
      const r = await c.send(new s.ListMultipartUploadsCommand({ Bucket: bucket }));
      for (const u of r.Uploads || []) console.log(`${u.Key}\t${u.UploadId}`);
      return;
    }
    case 'rm':
      await c.send(new s.DeleteObjectCommand({ Bucket: bucket, Key: key }));
      return;
    case 'truncate': {
      const r = await c.send(new s.GetObjectCommand({ Bucket: bucket, Key: key }));
      const b = Buffer.from(await r.Body.transformToByteArray());
      await c.send(new s.PutObjectCommand({ Bucket: bucket, Key: key, Body: b.subarray(0, Number(arg)) }));
      return;
    }
    case 'sha': {
      const r = await c.send(new s.GetObjectCommand({ Bucket: bucket, Key: key }));
      const b = Buffer.from(await r.Body.transformToByteArray());
      console.log(require('crypto').createHash('sha256').update(b.subarray(Number(arg))).digest('hex'));
      return;
    }
    case 'flip': {
      const r = await c.send(new s.GetObjectCommand({ Bucket: bucket, Key: key }));
      const b = Buffer.from(await r.Body.transformToByteArray());
      b[Number(arg)] ^= 0x20;
      await c.send(new s.PutObjectCommand({ Bucket: bucket, Key: key, Body: b }));
      return;
    }
  }
  throw new Error(`unknown command ${cmd}`);
}

async function azure() {
  const { BlobServiceClient } = require('@azure/storage-blob');
  const svc = BlobServiceClient.fromConnectionString(process.env.AZURE_STORAGE_CONNECTION_STRING);
  const cc = svc.getContainerClient(bucket);
  switch (cmd) {
    case 'mkbucket':
      await cc.create();
      return;
    case 'ls':
      for await (const b of cc.listBlobsFlat({ prefix: key || undefined })) console.log(`${b.name}\t${b.properties.contentLength}`);
      return;
    case 'uploads':
      // Blobs with uncommitted blocks: the Azure form of an unfinished upload.
      for await (const b of cc.listBlobsFlat({ includeUncommitedBlobs: true })) {
        const l = await cc.getBlockBlobClient(b.name).getBlockList('uncommitted').catch(() => null);
        if (l && l.uncommittedBlocks && l.uncommittedBlocks.length) console.log(`${b.name}\t${l.uncommittedBlocks.length}`);
      }
      return;
    case 'rm':
      await cc.deleteBlob(key);
      return;
    case 'truncate': {
      const bc = cc.getBlockBlobClient(key);
      const b = await bc.downloadToBuffer();
      await bc.upload(b.subarray(0, Number(arg)), Number(arg));
      return;
    }
    case 'sha': {
      const b = await cc.getBlockBlobClient(key).downloadToBuffer();
      console.log(require('crypto').createHash('sha256').update(b.subarray(Number(arg))).digest('hex'));
      return;
    }
    case 'flip': {
      const bc = cc.getBlockBlobClient(key);
      const b = await bc.downloadToBuffer();
      b[Number(arg)] ^= 0x20;
      await bc.upload(b, b.length);
      return;
    }
  }
  throw new Error(`unknown command ${cmd}`);
}

(kind === 's3' ? s3() : azure()).catch((e) => {
  console.error(`${kind} ${cmd}: ${e.name}: ${e.message}`);
  process.exit(1);
});
