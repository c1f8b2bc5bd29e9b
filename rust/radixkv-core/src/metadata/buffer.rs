//! The single-buffer container every metadata builder fills.

/// Field offsets are rounded up to this many int32 elements (64 bytes), so each device view
/// starts on a boundary that vectorised loads like.
pub const FIELD_ALIGN: usize = 16;

/// One named int32 array inside a [`MetadataBuf`]: `data[offset .. offset + numel]`, row-major.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub name: &'static str,
    pub offset: usize,
    /// One entry per dimension (1-D or 2-D).
    pub shape: Vec<usize>,
}

impl Field {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// All int32 arrays of one batch in one allocation, plus a few host-side integers
/// (maxima that kernels take as launch parameters and should not read back from the device).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetadataBuf {
    pub data: Vec<i32>,
    pub fields: Vec<Field>,
    pub scalars: Vec<(&'static str, i64)>,
}

impl MetadataBuf {
    /// The slice of field `name`, if the builder produced it.
    pub fn field(&self, name: &str) -> Option<&[i32]> {
        self.fields
            .iter()
            .find(|f| f.name == name)
            .map(|f| &self.data[f.offset..f.offset + f.numel()])
    }

    pub fn scalar(&self, name: &str) -> Option<i64> {
        self.scalars
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, v)| v)
    }

    /// Appends field `decode_plan` (flat, [`super::plan`]'s layout) built from this batch's
    /// `seq_lens` and `page_size`, and the scalars `plan_units`, `plan_capacity`, `plan_chunk`, so
    /// the plan travels to the device in the batch's one copy. `slots`: work units the GPU runs at
    /// once; `capacity`: unit rows (`None`: exactly those used; pass
    /// [`super::decode_plan_capacity`] for CUDA graphs). On error `self` is unchanged.
    pub fn with_decode_plan(&mut self, slots: usize, capacity: Option<usize>) -> crate::Result<()> {
        let lens: Vec<usize> = self
            .field("seq_lens")
            .ok_or_else(|| crate::CoreError::invalid("metadata has no seq_lens to plan from"))?
            .iter()
            .map(|&l| usize::try_from(l).unwrap_or(0))
            .collect();
        let page_size = usize::try_from(self.scalar("page_size").unwrap_or(1)).unwrap_or(1);
        let mut plan = Vec::new();
        let info = super::plan::decode_plan_into(&lens, page_size, slots, capacity, &mut plan)?;
        self.append("decode_plan", &plan, vec![plan.len()])?;
        self.scalars.push(("plan_units", info.units as i64));
        self.scalars.push(("plan_capacity", info.capacity as i64));
        self.scalars.push(("plan_chunk", info.chunk as i64));
        Ok(())
    }
}

impl MetadataBuf {
    /// Appends field `extend_plan` (int32 `[n, 2]`, [`super::extend_plan`]'s layout; `n` = 0 for a
    /// batch whose requests all have the same lengths) built from this extend batch's
    /// `extend_seq_lens` and `seq_lens`, for `group` query heads per KV head and tiles of
    /// `tile_rows` rows, and the scalar `plan_tile_rows`, so the plan travels to the device in the
    /// batch's one copy.
    pub fn with_extend_plan(&mut self, group: usize, tile_rows: usize) -> crate::Result<()> {
        let missing =
            || crate::CoreError::invalid("metadata has no extend_seq_lens / seq_lens to plan from");
        let q = self.field("extend_seq_lens").ok_or_else(missing)?;
        let k = self.field("seq_lens").ok_or_else(missing)?;
        let plan = super::extend_plan::extend_plan(q, k, group, tile_rows)?;
        self.append(
            "extend_plan",
            &plan,
            vec![
                plan.len() / super::EXTEND_PLAN_COLS,
                super::EXTEND_PLAN_COLS,
            ],
        )?;
        self.scalars.push(("plan_tile_rows", tile_rows as i64));
        Ok(())
    }

    /// Appends `values` as field `name` of `shape`, at the next aligned offset.
    fn append(
        &mut self,
        name: &'static str,
        values: &[i32],
        shape: Vec<usize>,
    ) -> crate::Result<()> {
        let offset = self.data.len().next_multiple_of(FIELD_ALIGN);
        self.data
            .try_reserve(offset - self.data.len() + values.len())
            .map_err(|_| crate::CoreError::invalid(format!("cannot allocate {name}")))?;
        self.data.resize(offset, 0);
        self.data.extend_from_slice(values);
        self.fields.push(Field {
            name,
            offset,
            shape,
        });
        Ok(())
    }
}

/// Appends fields one after another into one vector, padding between them.
pub(crate) struct BufBuilder {
    buf: MetadataBuf,
}

impl BufBuilder {
    /// `sizes`: the element count of every field to come, so the vector is allocated once.
    /// An allocation the system refuses is an `InvalidArgument`, not an abort.
    pub(crate) fn new(sizes: &[usize]) -> crate::Result<Self> {
        let cap = sizes
            .iter()
            .try_fold(0usize, |acc, s| {
                acc.checked_add(s.checked_add(FIELD_ALIGN)?)
            })
            .ok_or_else(|| crate::CoreError::invalid("metadata size overflows"))?;
        Ok(BufBuilder {
            buf: MetadataBuf {
                data: try_vec(cap)?,
                ..MetadataBuf::default()
            },
        })
    }

    /// Adds field `name` of `shape`; `fill` must push exactly `numel(shape)` values.
    pub(crate) fn field(
        &mut self,
        name: &'static str,
        shape: &[usize],
        fill: impl FnOnce(&mut Vec<i32>),
    ) -> &mut Self {
        let data = &mut self.buf.data;
        let offset = data.len().next_multiple_of(FIELD_ALIGN);
        data.resize(offset, 0);
        fill(data);
        let numel: usize = shape.iter().product();
        debug_assert_eq!(
            data.len() - offset,
            numel,
            "field {name} filled with the wrong count"
        );
        self.buf.fields.push(Field {
            name,
            offset,
            shape: shape.to_vec(),
        });
        self
    }

    pub(crate) fn scalar(&mut self, name: &'static str, value: usize) -> &mut Self {
        // Every scalar is bounded by an int32 total checked before building.
        self.buf.scalars.push((name, value as i64));
        self
    }

    pub(crate) fn finish(self) -> MetadataBuf {
        self.buf
    }
}

/// `[0, a0, a0+a1, ...]` for lengths already known to sum within int32.
pub(crate) fn push_indptr(out: &mut Vec<i32>, lens: impl Iterator<Item = usize>) {
    let mut acc = 0usize;
    out.push(0);
    for l in lens {
        acc += l;
        out.push(acc as i32);
    }
}

/// Sums `lens`, failing if the total does not fit an int32 index (what `*_indptr` hold).
pub(crate) fn checked_total(lens: impl Iterator<Item = usize>, what: &str) -> crate::Result<usize> {
    let mut total = 0usize;
    for l in lens {
        total = total
            .checked_add(l)
            .filter(|&t| i32::try_from(t).is_ok())
            .ok_or_else(|| crate::CoreError::invalid(format!("{what} exceeds int32 range")))?;
    }
    Ok(total)
}

/// An empty vector with room for `cap` elements, or `InvalidArgument` if memory is refused.
pub(crate) fn try_vec<T>(cap: usize) -> crate::Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(cap).map_err(|_| {
        crate::CoreError::invalid(format!("cannot allocate {cap} elements of metadata"))
    })?;
    Ok(v)
}
