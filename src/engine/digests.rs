//! A file's chunk digests, by chunk number: what its checksum is made of, in both
//! pipelines.

use smallvec::SmallVec;

/// Chunk number -> digest, sorted. Most files are one chunk: kept inline, no heap.
/// Frames come mostly in order, so the list grows at its end; memory follows the
/// chunks recorded, never a size a manifest claims.
#[derive(Default, Debug, Clone)]
pub struct ChunkDigests(SmallVec<[(u64, [u8; 32]); 1]>);

impl ChunkDigests {
    /// Records a chunk's digest; false when the chunk has one already.
    pub fn insert(&mut self, chunk: u64, d: [u8; 32]) -> bool {
        let v = &mut self.0;
        let at = match v.last() {
            None => 0,
            Some(&(k, _)) if k < chunk => v.len(),
            _ => match v.binary_search_by_key(&chunk, |e| e.0) {
                Ok(_) => return false,
                Err(at) => at,
            },
        };
        v.insert(at, (chunk, d));
        true
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The digests in chunk order.
    pub fn values(&self) -> impl Iterator<Item = &[u8; 32]> {
        self.0.iter().map(|e| &e.1)
    }

    /// The first chunk of `0..chunks` with no digest.
    pub fn first_missing(&self, chunks: u64) -> Option<u64> {
        let gap = (self.0.iter().enumerate())
            .find(|&(i, e)| i as u64 != e.0)
            .map_or(self.0.len() as u64, |(i, _)| i as u64);
        (gap < chunks).then_some(gap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_stay_sorted_refuse_a_second_and_name_the_first_gap() {
        let mut d = ChunkDigests::default();
        assert_eq!(d.first_missing(0), None);
        assert_eq!(d.first_missing(2), Some(0));
        for c in [3, 0, 1] {
            assert!(d.insert(c, [c as u8; 32]));
        }
        assert!(!d.insert(1, [9; 32]), "chunk 1 twice");
        assert_eq!(d.values().map(|v| v[0]).collect::<Vec<_>>(), [0, 1, 3]);
        assert_eq!(
            (d.len(), d.first_missing(4), d.first_missing(2)),
            (3, Some(2), None)
        );
        assert!(d.insert(2, [2; 32]));
        assert_eq!(d.first_missing(4), None);
        assert_eq!(d.first_missing(5), Some(4));
    }
}
