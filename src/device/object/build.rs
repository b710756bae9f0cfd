//! Building a store client from the environment, and its errors in plain words.

use super::*;

pub(super) const CREDS: &str = "the store refused the credentials: check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (s3://), the AZURE_STORAGE_* variables (azure://) or the service account GOOGLE_APPLICATION_CREDENTIALS or GOOGLE_SERVICE_ACCOUNT names (gs://)";

/// Turns an object_store error into a message that says what to do.
pub(super) fn explain(name: &str, what: &str, e: object_store::Error) -> anyhow::Error {
    let text = e.to_string();
    let hint = match &e {
        object_store::Error::NotFound { .. } if text.contains("NoSuchBucket") => {
            "the bucket does not exist: create it first"
        }
        object_store::Error::NotFound { .. } if text.contains("ContainerNotFound") => {
            "the container does not exist: create it first"
        }
        object_store::Error::NotFound { .. } => "it does not exist",
        object_store::Error::Unauthenticated { .. }
        | object_store::Error::PermissionDenied { .. } => CREDS,
        _ if text.contains("SignatureDoesNotMatch")
            || text.contains("InvalidAccessKeyId")
            || text.contains("AuthenticationFailed")
            || text.contains("403 Forbidden") =>
        {
            CREDS
        }
        _ if text.contains("NoSuchBucket") => "the bucket does not exist: create it first",
        _ if text.contains("ContainerNotFound") => "the container does not exist: create it first",
        _ if text.contains("retries") || text.contains("error sending request") => {
            "the store did not answer (retried with back-off until the time limit)"
        }
        _ => "",
    };
    let transient = hint.starts_with("the store did not answer");
    let text = compact(&redact(&text));
    if transient {
        crate::fault::transient(format!("{what} '{name}': {hint} ({text})"))
    } else if hint.is_empty() {
        anyhow!("{what} '{name}': {text}")
    } else {
        anyhow!("{what} '{name}': {hint} ({text})")
    }
}

/// A server's XML error body shrunk to its code and the first line of its message.
pub(super) fn compact(text: &str) -> String {
    let tag = |t: &str| -> Option<String> {
        let a = text.find(&format!("<{t}>"))? + t.len() + 2;
        let b = text[a..].find(&format!("</{t}>"))? + a;
        Some(text[a..b].lines().next().unwrap_or("").trim().to_string())
    };
    match (text.find(": <?xml"), tag("Code")) {
        (Some(at), Some(code)) => format!(
            "{}: {code}: {}",
            &text[..at],
            tag("Message").unwrap_or_default()
        ),
        _ => text.to_string(),
    }
}

/// Removes anything that looks like a signature or key from a server message.
pub(super) fn redact(s: &str) -> String {
    const KEYS: [&str; 7] = [
        "x-amz-signature=",
        "x-amz-credential=",
        "x-amz-security-token=",
        "sig=",
        "x-goog-signature=",
        "x-goog-credential=",
        "access_token=",
    ];
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    loop {
        let lower = rest.to_ascii_lowercase();
        let hit = KEYS
            .iter()
            .filter_map(|k| lower.find(k).map(|i| (i, k.len())))
            .min();
        let Some((i, kl)) = hit else {
            out.push_str(rest);
            return out;
        };
        out.push_str(&rest[..i + kl]);
        out.push_str("REDACTED");
        let after = &rest[i + kl..];
        let end = after
            .find(|c: char| c == '&' || c == '"' || c.is_whitespace())
            .unwrap_or(after.len());
        rest = &after[end..];
    }
}

pub(super) fn is_loopback(url: &str) -> bool {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .unwrap_or(url);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    // A user part ("127.0.0.1@elsewhere") would hide the real host: never loopback.
    if authority.contains('@') {
        return false;
    }
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

pub(super) fn check_endpoint(url: &str, var: &str) -> Result<bool> {
    if url.starts_with("https://") {
        return Ok(false);
    }
    if !url.starts_with("http://") {
        bail!("{var} '{url}' is not an http:// or https:// URL");
    }
    if !is_loopback(url) {
        bail!("{var} '{url}': plain HTTP is allowed only to a loopback address; use https://");
    }
    Ok(true)
}

/// Client options; a private CA (a self-signed test server, a company CA) comes from
/// PAGEVAULT_CA_FILE, or AWS_CA_BUNDLE for S3, as a PEM bundle (docs/guide/10-object-stores.md).
pub(super) fn client_options(allow_http: bool, kind: Kind) -> Result<ClientOptions> {
    let mut o = ClientOptions::new()
        .with_allow_http(allow_http)
        .with_connect_timeout(Duration::from_secs(5))
        .with_timeout(Duration::from_secs(120));
    let ca = std::env::var("PAGEVAULT_CA_FILE")
        .ok()
        .map(|f| (f, "PAGEVAULT_CA_FILE"))
        .or_else(|| {
            (kind == Kind::S3)
                .then(|| std::env::var("AWS_CA_BUNDLE").ok())
                .flatten()
                .map(|f| (f, "AWS_CA_BUNDLE"))
        });
    if let Some((file, var)) = ca {
        let pem =
            std::fs::read(&file).map_err(|e| anyhow!("{var} '{file}' cannot be read: {e}"))?;
        let certs = object_store::Certificate::from_pem_bundle(&pem)
            .map_err(|e| anyhow!("{var} '{file}' holds no usable PEM certificate: {e}"))?;
        for c in certs {
            o = o.with_root_certificate(c);
        }
    }
    Ok(o)
}

/// Retries for up to PAGEVAULT_RETRY_SECONDS (docs/guide/10-object-stores.md; the tests shorten
/// it to fail fast against a server they stopped).
pub(super) fn retry_config() -> RetryConfig {
    let secs = std::env::var("PAGEVAULT_RETRY_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(180u64);
    RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(10),
            base: 2.0,
        },
        max_retries: 20,
        retry_timeout: Duration::from_secs(secs),
    }
}

pub(super) fn build_s3(bucket: &str, o: &StoreOptions) -> Result<Arc<dyn ObjectStore>> {
    let mut b = AmazonS3Builder::from_env().with_bucket_name(bucket);
    let endpoint = (o.s3_endpoint.clone())
        .map(|e| (e, "--s3-endpoint"))
        .or_else(|| {
            std::env::var("AWS_ENDPOINT_URL")
                .ok()
                .map(|e| (e, "AWS_ENDPOINT_URL"))
        });
    let mut allow_http = false;
    if let Some((e, var)) = endpoint {
        allow_http = check_endpoint(&e, var)?;
        b = b.with_endpoint(e);
    }
    if std::env::var_os("AWS_REGION").is_none() && std::env::var_os("AWS_DEFAULT_REGION").is_none()
    {
        b = b.with_region("us-east-1");
    }
    if !s3_has_credentials(&|v| std::env::var(v).ok(), on_ec2()) {
        bail!("s3://{bucket}: no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN (web identity, EKS IRSA); ECS task and EKS Pod Identity credentials come from AWS_CONTAINER_CREDENTIALS_*, an EC2 instance's role from its metadata");
    }
    // No SHA-256 of every part on both ends: TLS guards the transfer, and every frame
    // is checked on restore (its CRC32C and content digest, or its tag). Conditional
    // PUTs (If-None-Match, If-Match) make the repository marker's compare and swap.
    b.with_unsigned_payload(true)
        .with_conditional_put(object_store::aws::S3ConditionalPut::ETagMatch)
        .with_client_options(client_options(allow_http, Kind::S3)?)
        .with_retry(retry_config())
        .build()
        .map(|s| Arc::new(s) as Arc<dyn ObjectStore>)
        .map_err(|e| anyhow!("s3://{bucket}: {}", redact(&e.to_string())))
}

/// `Key=Value;...` of an Azure connection string.
pub(super) fn connection_string(s: &str) -> HashMap<String, String> {
    s.split(';')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect()
}

pub(super) fn build_azure(container: &str) -> Result<Arc<dyn ObjectStore>> {
    let mut b = MicrosoftAzureBuilder::new().with_container_name(container);
    let mut allow_http = false;
    let mut have_creds = false;
    if let Ok(cs) = std::env::var("AZURE_STORAGE_CONNECTION_STRING") {
        let kv = connection_string(&cs);
        if kv
            .get("usedevelopmentstorage")
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
        {
            b = b.with_use_emulator(true);
            allow_http = true;
            have_creds = true;
        }
        if let Some(a) = kv.get("accountname") {
            b = b.with_account(a);
        }
        if let Some(k) = kv.get("accountkey") {
            b = b.with_access_key(k);
            have_creds = true;
        }
        if let Some(e) = kv.get("blobendpoint") {
            allow_http = check_endpoint(e, "BlobEndpoint of AZURE_STORAGE_CONNECTION_STRING")?;
            b = b.with_endpoint(e.trim_end_matches('/').to_string());
        }
    } else {
        // The AZURE_* variables object_store reads: account, key, SAS, service
        // principal, workload identity, managed identity, Azure CLI, endpoint.
        b = MicrosoftAzureBuilder::from_env().with_container_name(container);
        let emulator = std::env::var("AZURE_STORAGE_USE_EMULATOR")
            .is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1");
        if emulator {
            b = b.with_use_emulator(true);
            allow_http = true;
            have_creds = true;
        }
        for var in ["AZURE_STORAGE_ENDPOINT", "AZURE_ENDPOINT"] {
            if let Ok(e) = std::env::var(var) {
                allow_http |= check_endpoint(&e, var)?;
            }
        }
        have_creds |= azure_has_credentials(&|v| std::env::var(v).ok(), on_azure());
    }
    if !have_creds {
        bail!("azure://{container}: no credentials: set AZURE_STORAGE_CONNECTION_STRING, or AZURE_STORAGE_ACCOUNT_NAME with AZURE_STORAGE_ACCOUNT_KEY or AZURE_STORAGE_SAS_TOKEN, or AZURE_CLIENT_ID and AZURE_TENANT_ID with AZURE_FEDERATED_TOKEN_FILE (workload identity) or AZURE_CLIENT_SECRET; an Azure VM's managed identity is used on its own (AZURE_STORAGE_USE_EMULATOR=true for Azurite)");
    }
    b.with_client_options(client_options(allow_http, Kind::Azure)?)
        .with_retry(retry_config())
        .build()
        .map(|s| Arc::new(s) as Arc<dyn ObjectStore>)
        .map_err(|e| anyhow!("azure://{container}: {}", redact(&e.to_string())))
}

/// Whether object_store finds GCS credentials other than the metadata server's: a
/// service account file or key, an application-default credentials file (named by
/// GOOGLE_APPLICATION_CREDENTIALS, or gcloud's well-known one: `adc_file`). The metadata
/// server counts on Google Cloud (`on_gce`) or where GCE_METADATA_* name it; elsewhere
/// object_store would wait on an address that never answers.
pub(super) fn gcs_has_credentials(
    var: &dyn Fn(&str) -> Option<String>,
    adc_file: bool,
    on_gce: bool,
) -> bool {
    const VARS: [&str; 8] = [
        "GOOGLE_SERVICE_ACCOUNT",
        "GOOGLE_SERVICE_ACCOUNT_PATH",
        "SERVICE_ACCOUNT",
        "GOOGLE_SERVICE_ACCOUNT_KEY",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "GCE_METADATA_HOST",
        "GCE_METADATA_ROOT",
        "GCE_METADATA_IP",
    ];
    adc_file || on_gce || VARS.iter().any(|v| var(v).is_some_and(|s| !s.is_empty()))
}

/// Google's client libraries take a machine whose DMI product name says Google for a
/// Compute Engine (or GKE) machine, with a metadata server.
fn on_gce() -> bool {
    std::fs::read_to_string("/sys/class/dmi/id/product_name")
        .is_ok_and(|p| p.trim().starts_with("Google"))
}

/// STORAGE_EMULATOR_HOST (the variable Google's client libraries read; `host:port` or a
/// URL) points gs:// at an emulator, with no OAuth. object_store takes another base URL
/// only from a service account's `gcs_base_url`, so one is made for it.
pub(super) fn build_gcs(bucket: &str) -> Result<Arc<dyn ObjectStore>> {
    let mut allow_http = false;
    let b = match std::env::var("STORAGE_EMULATOR_HOST") {
        Ok(host) if !host.is_empty() => {
            let url = match host.contains("://") {
                true => host.trim_end_matches('/').to_string(),
                false => format!("http://{}", host.trim_end_matches('/')),
            };
            allow_http = check_endpoint(&url, "STORAGE_EMULATOR_HOST")?;
            let account = serde_json::json!({
                "gcs_base_url": url,
                "disable_oauth": true,
                "client_email": "",
                "private_key": "",
                "private_key_id": "",
            });
            GoogleCloudStorageBuilder::new().with_service_account_key(account.to_string())
        }
        _ => {
            let adc = std::env::var_os("HOME").is_some_and(|h| {
                std::path::Path::new(&h)
                    .join(".config/gcloud/application_default_credentials.json")
                    .is_file()
            });
            if !gcs_has_credentials(&|v| std::env::var(v).ok(), adc, on_gce()) {
                bail!("gs://{bucket}: no credentials: set GOOGLE_APPLICATION_CREDENTIALS to a service account key file or the file `gcloud auth application-default login` writes, or GOOGLE_SERVICE_ACCOUNT to a key file (GOOGLE_SERVICE_ACCOUNT_KEY to its JSON); on Google Cloud the metadata server's are used (STORAGE_EMULATOR_HOST for an emulator)");
            }
            GoogleCloudStorageBuilder::from_env()
        }
    };
    b.with_bucket_name(bucket)
        .with_client_options(client_options(allow_http, Kind::Gcs)?)
        .with_retry(retry_config())
        .build()
        .map(|s| Arc::new(s) as Arc<dyn ObjectStore>)
        .map_err(|e| anyhow!("gs://{bucket}: {}", redact(&e.to_string())))
}

/// Whether object_store finds S3 credentials other than an EC2 instance's: static keys,
/// a web identity token (EKS IRSA), ECS task or EKS Pod Identity credentials. The
/// instance's count on EC2 (`on_ec2`) or where AWS_METADATA_ENDPOINT names the service;
/// elsewhere object_store would wait on an address that never answers.
pub(super) fn s3_has_credentials(var: &dyn Fn(&str) -> Option<String>, on_ec2: bool) -> bool {
    let set = |k: &str| var(k).is_some_and(|v| !v.is_empty());
    set("AWS_ACCESS_KEY_ID")
        || (set("AWS_WEB_IDENTITY_TOKEN_FILE") && set("AWS_ROLE_ARN"))
        || set("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
        || (set("AWS_CONTAINER_CREDENTIALS_FULL_URI")
            && set("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"))
        || set("AWS_METADATA_ENDPOINT")
        || on_ec2
}

/// EC2 (Nitro) names itself in the DMI vendor; Xen instances in the hypervisor's uuid.
fn on_ec2() -> bool {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    [
        "/sys/class/dmi/id/sys_vendor",
        "/sys/class/dmi/id/board_vendor",
    ]
    .iter()
    .any(|p| read(p).trim() == "Amazon EC2")
        || read("/sys/hypervisor/uuid")
            .to_ascii_lowercase()
            .starts_with("ec2")
}

/// Whether object_store finds Azure credentials without a connection string, other than
/// a VM's managed identity: an account key, a SAS, a bearer token, a service principal
/// (secret or federated token file: AKS workload identity), the Azure CLI's login. The
/// managed identity counts on Azure (`on_azure`) or where an identity endpoint is named.
pub(super) fn azure_has_credentials(var: &dyn Fn(&str) -> Option<String>, on_azure: bool) -> bool {
    let set = |k: &str| var(k).is_some_and(|v| !v.is_empty());
    let any = |ks: &[&str]| ks.iter().any(|k| set(k));
    let principal = any(&["AZURE_CLIENT_ID", "AZURE_STORAGE_CLIENT_ID"])
        && any(&[
            "AZURE_TENANT_ID",
            "AZURE_STORAGE_TENANT_ID",
            "AZURE_AUTHORITY_ID",
            "AZURE_STORAGE_AUTHORITY_ID",
        ])
        && any(&[
            "AZURE_CLIENT_SECRET",
            "AZURE_STORAGE_CLIENT_SECRET",
            "AZURE_FEDERATED_TOKEN_FILE",
        ]);
    let cli = var("AZURE_USE_AZURE_CLI").is_some_and(|v| {
        ["1", "true", "on", "yes", "y"].contains(&v.to_ascii_lowercase().as_str())
    });
    principal
        || cli
        || on_azure
        || any(&[
            "AZURE_STORAGE_ACCOUNT_KEY",
            "AZURE_STORAGE_ACCESS_KEY",
            "AZURE_STORAGE_MASTER_KEY",
            "AZURE_STORAGE_SAS_KEY",
            "AZURE_STORAGE_SAS_TOKEN",
            "AZURE_STORAGE_TOKEN",
            "AZURE_MSI_ENDPOINT",
            "AZURE_IDENTITY_ENDPOINT",
            "IDENTITY_ENDPOINT",
        ])
}

/// Azure's VMs carry this DMI chassis asset tag.
fn on_azure() -> bool {
    std::fs::read_to_string("/sys/class/dmi/id/chassis_asset_tag")
        .is_ok_and(|t| t.trim() == "7783-7084-3265-9085-8269-3286-77")
}
