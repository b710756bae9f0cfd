use super::retry::backoff_of;
use super::stripe::part_size;
use super::*;

#[test]
fn backoff_message_parses() {
    assert_eq!(
        backoff_of("Encountered server error with status 503 Service Unavailable, backing off for 0.25 seconds, retry 1 of 10"),
        Some(0.25)
    );
    assert_eq!(backoff_of("something else"), None);
}

#[test]
fn parts_fit_any_stripe() {
    for kind in [Kind::S3, Kind::Azure, Kind::Gcs] {
        for expected in [0u64, 1 << 30, 1 << 40, 5 << 40] {
            let (base, step) = part_plan(kind, 1 << 20, expected);
            let max_parts = if kind == Kind::Azure {
                AZ_MAX_PARTS
            } else {
                S3_MAX_PARTS
            };
            let total: u64 = (0..max_parts)
                .map(|i| part_size(kind, base, step, i) as u64)
                .sum();
            // Even twice the expected size (at least 1 TiB) fits in the part limit.
            assert!(total >= (2 * expected).max(1 << 40), "{kind:?} {expected}");
            if kind != Kind::Azure {
                assert!(base >= S3_MIN_PART);
            }
        }
    }
}

#[test]
fn loopback_only_for_http() {
    assert!(check_endpoint("http://127.0.0.1:9000", "x").unwrap());
    assert!(check_endpoint("http://localhost:9000/", "x").unwrap());
    assert!(check_endpoint("http://[::1]:9000", "x").unwrap());
    assert!(check_endpoint("http://example.com:9000", "x").is_err());
    // A user part or a name that only looks like an address is not loopback.
    for forged in [
        "http://127.0.0.1@host.invalid:9000",
        "http://127.0.0.1:1@host.invalid/",
        "http://127.evil.example:9000",
        "http://[::1]@host.invalid",
    ] {
        assert!(check_endpoint(forged, "x").is_err(), "{forged}");
    }
    assert!(!check_endpoint("https://example.com", "x").unwrap());
}

#[test]
fn signatures_are_redacted() {
    let r = redact("GET http://h/b/k?X-Amz-Credential=AKIA/x&X-Amz-Signature=abc123 failed");
    assert!(!r.contains("abc123") && !r.contains("AKIA"), "{r}");
    // A GCS signed URL's, and an OAuth token in a query.
    let r = redact("PUT https://h/b/k?X-Goog-Credential=sa%40p/x&X-Goog-Signature=0f9e failed");
    assert!(!r.contains("0f9e") && !r.contains("sa%40p"), "{r}");
    let r = redact("GET http://h/token?access_token=ya29.secret&x=1");
    assert!(!r.contains("ya29") && r.contains("&x=1"), "{r}");
}

#[test]
fn gcs_credentials_are_found_where_object_store_looks() {
    let none = |_: &str| None;
    assert!(!gcs_has_credentials(&none, false, false));
    assert!(
        gcs_has_credentials(&none, true, false),
        "gcloud's well-known file"
    );
    assert!(gcs_has_credentials(&none, false, true), "on Google Cloud");
    for v in [
        "GOOGLE_APPLICATION_CREDENTIALS",
        "GOOGLE_SERVICE_ACCOUNT",
        "GOOGLE_SERVICE_ACCOUNT_KEY",
        "GCE_METADATA_HOST",
    ] {
        let one = |k: &str| (k == v).then(|| "x".to_string());
        assert!(gcs_has_credentials(&one, false, false), "{v}");
        let empty = |k: &str| (k == v).then(String::new);
        assert!(!gcs_has_credentials(&empty, false, false), "{v} empty");
    }
    // Another store's are not GCS credentials.
    let aws = |k: &str| (k == "AWS_ACCESS_KEY_ID").then(|| "x".to_string());
    assert!(!gcs_has_credentials(&aws, false, false));
}

#[test]
fn stores_are_shared_per_bucket_and_endpoint() {
    // Building a store needs credentials, not a server: no request is made.
    for (k, v) in [
        ("AWS_ACCESS_KEY_ID", "unit"),
        ("AWS_SECRET_ACCESS_KEY", "unit"),
    ] {
        if std::env::var_os(k).is_none() {
            std::env::set_var(k, v);
        }
    }
    let at = |e: &str| StoreOptions {
        s3_endpoint: Some(e.to_string()),
        key: None,
    };
    let (a, b) = (at("http://127.0.0.1:9"), at("http://127.0.0.1:10"));
    let store = |o: &StoreOptions| parse("s3://pv-unit/k", o).unwrap().unwrap().store;
    assert!(Arc::ptr_eq(&store(&a), &store(&a)));
    assert!(!Arc::ptr_eq(&store(&a), &store(&b)));
    assert_eq!(a.endpoint_option(), " --s3-endpoint http://127.0.0.1:9");
    assert_eq!(StoreOptions::default().endpoint_option(), "");
}

#[test]
fn downloads_are_bounded_and_streamed() {
    let loc = Location {
        kind: Kind::S3,
        bucket: "b".into(),
        key: "wal/x.zst".into(),
        store: Arc::new(object_store::memory::InMemory::new()),
    };
    assert_eq!(loc.get(10).unwrap(), None);
    let mut f = vec![];
    assert!(!loc.download(&mut f, 10).unwrap());
    let body: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
    loc.put(body.clone()).unwrap();
    assert_eq!(loc.get(3000).unwrap().unwrap(), body);
    assert!(loc.download(&mut f, 3000).unwrap());
    assert_eq!(f, body);
    // Over the limit: refused before a byte is read.
    let e = format!("{:#}", loc.get(2999).unwrap_err());
    assert!(e.contains("3000 bytes, more than the 2999"), "{e}");
    let mut g = vec![];
    assert!(loc.download(&mut g, 2999).is_err());
    assert!(g.is_empty());
}

#[test]
fn version_ids_are_bounded_and_of_the_stores_characters() {
    // S3 (MinIO, AWS), Azure (a timestamp) and GCS (a generation) version ids.
    for ok in [
        "1795874524767697",
        "3b9c6f0e-5a2e-4c1d-9f0a-1b2c3d4e5f60",
        "3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY+MTRCxf3vjVBH40Nr8X8gdRQBpUMLUo",
        "2026-11-27T08:33:35.1234567Z",
    ] {
        assert!(valid_version(ok), "{ok}");
    }
    let long = "a".repeat(VERSION_MAX + 1);
    for bad in ["", "null", "a b", "x&versionId=y", "a\u{1b}[2J", &long] {
        assert!(!valid_version(bad), "{bad:?}");
    }
}

#[test]
fn s3_credentials_are_found_where_object_store_looks() {
    let of =
        |pairs: &'static [&'static str]| move |k: &str| pairs.contains(&k).then(|| "x".to_string());
    assert!(!s3_has_credentials(&of(&[]), false));
    assert!(s3_has_credentials(&of(&[]), true), "an EC2 instance's role");
    for ok in [
        &["AWS_ACCESS_KEY_ID"][..],
        &["AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN"],
        &["AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"],
        &[
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
        ],
        &["AWS_METADATA_ENDPOINT"],
    ] {
        assert!(s3_has_credentials(&of(ok), false), "{ok:?}");
    }
    // Half of a pair is not enough; a profile is not read by object_store.
    for no in [
        &["AWS_WEB_IDENTITY_TOKEN_FILE"][..],
        &["AWS_ROLE_ARN"],
        &["AWS_CONTAINER_CREDENTIALS_FULL_URI"],
        &["AWS_PROFILE"],
    ] {
        assert!(!s3_has_credentials(&of(no), false), "{no:?}");
    }
}

#[test]
fn azure_credentials_are_found_where_object_store_looks() {
    let of = |pairs: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    };
    assert!(!azure_has_credentials(&of(&[]), false));
    assert!(
        azure_has_credentials(&of(&[]), true),
        "a VM's managed identity"
    );
    const ID: (&str, &str) = ("AZURE_CLIENT_ID", "c");
    const TENANT: (&str, &str) = ("AZURE_TENANT_ID", "t");
    for ok in [
        &[("AZURE_STORAGE_ACCOUNT_KEY", "k")][..],
        &[("AZURE_STORAGE_SAS_TOKEN", "sv=1&sig=2")],
        &[ID, TENANT, ("AZURE_FEDERATED_TOKEN_FILE", "/var/run/t")],
        &[ID, TENANT, ("AZURE_CLIENT_SECRET", "s")],
        &[("AZURE_USE_AZURE_CLI", "true")],
        &[("IDENTITY_ENDPOINT", "http://localhost:42356/msi/token")],
    ] {
        assert!(azure_has_credentials(&of(ok), false), "{ok:?}");
    }
    for no in [
        &[ID, ("AZURE_FEDERATED_TOKEN_FILE", "/var/run/t")][..],
        &[("AZURE_USE_AZURE_CLI", "false")],
        &[("AZURE_STORAGE_ACCOUNT_NAME", "a")],
    ] {
        assert!(!azure_has_credentials(&of(no), false), "{no:?}");
    }
}
