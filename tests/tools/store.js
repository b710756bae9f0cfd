// Test helper: administers the S3 (MinIO) and Azure Blob (Azurite) servers the tests
// start, with the vendors' own SDKs, for what pagevault itself never does
// (create buckets, list incomplete uploads, damage objects).
// Usage: node store.js s3|azure COMMAND BUCKET [KEY] [ARG]
//   mkbucket B | ls B [PREFIX] | uploads B | rm B KEY | truncate B KEY BYTES | flip B KEY OFFSET
//   | sha B KEY OFFSET (SHA-256 of the bytes from OFFSET, hex)
//   | mklocked B MODE:DAYS (object lock on, a default retention) | versions B [PREFIX]
//   | rmversion B KEY [VERSION[:bypass]] (a versioned delete) | put B KEY TEXT
//   | putnew B KEY TEXT (If-None-Match: *) | putfile B KEY PATH | shaversion B KEY VERSION
//   | denying ACTION,ACTION (temporary credentials denied those actions, tab separated)
//   | retention B KEY (the current version's mode and retain-until)
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
    case 'mklocked': {
      const [mode, days] = key.split(':');
      await c.send(new s.CreateBucketCommand({ Bucket: bucket, ObjectLockEnabledForBucket: true }));
      await c.send(new s.PutObjectLockConfigurationCommand({
        Bucket: bucket,
        ObjectLockConfiguration: {
          ObjectLockEnabled: 'Enabled',
          Rule: { DefaultRetention: { Mode: mode, Days: Number(days) } },
        },
      }));
      return;
    }
    case 'versions': {
      const r = await c.send(new s.ListObjectVersionsCommand({ Bucket: bucket, Prefix: key || undefined }));
      for (const v of r.Versions || []) console.log(`${v.Key}\t${v.VersionId}\t${v.Size}`);
      for (const m of r.DeleteMarkers || []) console.log(`${m.Key}\t${m.VersionId}\tdelete-marker`);
      return;
    }
    case 'rmversion': {
      // A versioned delete (what erases an object for good) of KEY's oldest version, or
      // of the version ARG; ARG 'bypass' adds the governance bypass header.
      const r = await c.send(new s.ListObjectVersionsCommand({ Bucket: bucket, Prefix: key }));
      const vs = [...(r.Versions || []), ...(r.DeleteMarkers || [])].filter((v) => v.Key === key);
      vs.sort((a, b) => new Date(a.LastModified) - new Date(b.LastModified));
      const [id, bypass] = (arg || '').split(':');
      const v = id ? vs.find((x) => x.VersionId === id) : vs[0];
      if (!v) throw new Error(`no version of ${key}`);
      await c.send(new s.DeleteObjectCommand({ Bucket: bucket, Key: key, VersionId: v.VersionId, BypassGovernanceRetention: bypass === 'bypass' || undefined }));
      return;
    }
    case 'putnew':
      // A create-only PUT (If-None-Match: *), as pagevault's own.
      await c.send(new s.PutObjectCommand({ Bucket: bucket, Key: key, Body: arg, IfNoneMatch: '*' }));
      return;
    case 'shaversion': {
      const r = await c.send(new s.GetObjectCommand({ Bucket: bucket, Key: key, VersionId: arg }));
      const b = Buffer.from(await r.Body.transformToByteArray());
      console.log(require('crypto').createHash('sha256').update(b).digest('hex'));
      return;
    }
    case 'denying': {
      // Temporary credentials (STS AssumeRole under this user's) whose session policy
      // allows every S3 action but the ones BUCKET (here: a comma list) names.
      const { SignatureV4 } = require('@smithy/signature-v4');
      const crypto = require('crypto');
      class Sha256 {
        constructor(secret) { this.h = secret ? crypto.createHmac('sha256', Buffer.from(secret)) : crypto.createHash('sha256'); }
        update(d) { this.h.update(Buffer.from(d)); }
        async digest() { return new Uint8Array(this.h.digest()); }
      }
      const policy = JSON.stringify({
        Version: '2012-10-17',
        Statement: [
          { Effect: 'Allow', Action: ['s3:*'], Resource: ['arn:aws:s3:::*'] },
          { Effect: 'Deny', Action: bucket.split(','), Resource: ['arn:aws:s3:::*'] },
        ],
      });
      const body = new URLSearchParams({ Action: 'AssumeRole', Version: '2011-06-15', DurationSeconds: '3600', Policy: policy }).toString();
      const url = new URL(process.env.AWS_ENDPOINT_URL);
      const signer = new SignatureV4({
        service: 'sts',
        region: process.env.AWS_REGION || 'us-east-1',
        credentials: { accessKeyId: process.env.AWS_ACCESS_KEY_ID, secretAccessKey: process.env.AWS_SECRET_ACCESS_KEY },
        sha256: Sha256,
      });
      const req = await signer.sign({
        method: 'POST', protocol: url.protocol, hostname: url.hostname, port: Number(url.port), path: '/',
        headers: { host: url.host, 'content-type': 'application/x-www-form-urlencoded' }, body,
      });
      const res = await fetch(`${url.origin}/`, { method: 'POST', headers: req.headers, body });
      const text = await res.text();
      if (!res.ok) throw new Error(`AssumeRole: ${res.status} ${text}`);
      const tag = (t) => (text.match(new RegExp(`<${t}>([^<]*)</${t}>`)) || [])[1];
      console.log(`${tag('AccessKeyId')}\t${tag('SecretAccessKey')}\t${tag('SessionToken')}`);
      return;
    }
    case 'put':
      await c.send(new s.PutObjectCommand({ Bucket: bucket, Key: key, Body: arg }));
      return;
    case 'putfile': {
      // The file at ARG, streamed in one PUT (a baseline upload of the same bytes).
      const fs = require('fs');
      const size = fs.statSync(arg).size;
      await c.send(new s.PutObjectCommand({
        Bucket: bucket, Key: key, Body: fs.createReadStream(arg), ContentLength: size,
      }));
      return;
    }
    case 'retention': {
      const r = await c.send(new s.GetObjectRetentionCommand({ Bucket: bucket, Key: key }));
      console.log(`${r.Retention.Mode}\t${new Date(r.Retention.RetainUntilDate).toISOString()}`);
      return;
    }
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
