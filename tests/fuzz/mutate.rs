//! Mutations.

use super::*;

/// One random damage to `b`: bytes flipped or set, a number overwritten, a range
/// copied from elsewhere (or from `other`), cut, removed, repeated or inserted.
pub(crate) fn mutate_bytes(r: &mut Rng, b: &mut Vec<u8>, other: &[u8]) {
    if b.is_empty() {
        b.extend_from_slice(&other[..other.len().min(r.below(512))]);
        return;
    }
    let at = r.below(b.len());
    match r.below(9) {
        0 => {
            for _ in 0..1 + r.below(8) {
                let i = r.below(b.len());
                b[i] ^= 1 << r.below(8);
            }
        }
        1 => b[at] = *r.pick(&[0, 0xff, 0x7f, 0x80, b'"', b'/', b'.']),
        2 => {
            let v = r.interesting(b.len() as u64);
            let w = *r.pick(&[2usize, 4, 8]);
            let at = at.min(b.len().saturating_sub(w));
            let n = w.min(b.len() - at);
            b[at..at + n].copy_from_slice(&v.to_le_bytes()[..n]);
        }
        3 => {
            let src = if r.chance(50) || other.is_empty() {
                b.clone()
            } else {
                other.to_vec()
            };
            let from = r.below(src.len());
            let n = r.below(4096).min(src.len() - from).min(b.len() - at);
            b[at..at + n].copy_from_slice(&src[from..from + n]);
        }
        4 => b.truncate(at),
        5 => {
            let n = r.below(4096).min(b.len() - at);
            b.drain(at..at + n);
        }
        6 => {
            let n = r.below(4096).min(b.len() - at);
            let piece = b[at..at + n].to_vec();
            b.splice(at..at, piece);
        }
        7 => {
            let n = r.below(1024);
            let fill = r.next() as u8;
            b.splice(at..at, std::iter::repeat_n(fill, n));
        }
        _ => b.resize(b.len() + r.below(8192), 0),
    }
}

/// A value no field should hold, or one of another type.
pub(crate) fn odd_value(r: &mut Rng, was: &Value) -> Value {
    let n = r.interesting(was.as_u64().unwrap_or(0));
    match r.below(14) {
        0 => n.into(),
        1 => (n as i64).wrapping_neg().into(),
        2 => Value::from(n as f64 * 1.5),
        3 => Value::Null,
        4 => "".into(),
        5 => r
            .pick(&[
                "..",
                "/",
                "a/../../b",
                "/etc/passwd",
                "./x",
                "a//b",
                "x\0y",
                "000000010000000000000001",
                "00000001.history",
            ])
            .to_string()
            .into(),
        6 => "é".repeat(r.below(5000)).into(),
        7 => Value::Bool(r.chance(50)),
        8 => Value::Array(vec![]),
        9 => serde_json::json!({}),
        10 => match was {
            Value::String(s) => s
                .chars()
                .take(r.below(s.len() + 1))
                .collect::<String>()
                .into(),
            _ => Value::Null,
        },
        11 => "f".repeat(r.below(80)).into(),
        12 => Value::Array(vec![was.clone(), was.clone()]),
        _ => (r.below(70000) as u64).into(),
    }
}

/// One structural change somewhere in a JSON document: a value replaced, a key
/// removed, an array element removed, repeated or swapped.
pub(crate) fn mutate_json(r: &mut Rng, v: &mut Value) {
    // A random path down the document, chosen first, then followed.
    let mut path: Vec<Value> = vec![];
    let mut cur = &*v;
    for _ in 0..r.below(5) {
        let step: Option<(Value, &Value)> = match cur {
            Value::Object(m) if !m.is_empty() => {
                let (k, n) = m.iter().nth(r.below(m.len())).unwrap();
                Some((k.clone().into(), n))
            }
            Value::Array(a) if !a.is_empty() => {
                let i = r.below(a.len());
                Some((i.into(), &a[i]))
            }
            _ => None,
        };
        match step {
            Some((k, n)) if r.chance(80) => {
                path.push(k);
                cur = n;
            }
            _ => break,
        }
    }
    let mut at = v;
    for k in &path {
        at = match k {
            Value::String(k) => &mut at[k.as_str()],
            k => &mut at[k.as_u64().unwrap() as usize],
        };
    }
    match at {
        Value::Object(m) if !m.is_empty() && r.chance(50) => {
            let k = m.keys().nth(r.below(m.len())).unwrap().clone();
            if r.chance(30) {
                m.remove(&k);
            } else {
                let was = m[&k].clone();
                m.insert(k, odd_value(r, &was));
            }
        }
        Value::Array(a) if !a.is_empty() && r.chance(50) => {
            let i = r.below(a.len());
            match r.below(3) {
                0 => {
                    a.remove(i);
                }
                1 => {
                    let e = a[i].clone();
                    a.insert(r.below(a.len() + 1), e);
                }
                _ => {
                    let j = r.below(a.len());
                    a.swap(i, j);
                }
            }
        }
        other => {
            let was = other.clone();
            *other = odd_value(r, &was);
        }
    }
}
