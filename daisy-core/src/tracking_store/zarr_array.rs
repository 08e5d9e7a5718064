//! One single-chunk, uncompressed, little-endian Zarr v3 array, memory-mapped
//! for writes: [`MappedArray`], and the functions that write its metadata and
//! chunk. The tracking store (`tracking_store`) is a group of these.
//!
//! With one chunk and only the `bytes` codec, the chunk file *is* the
//! array: element `i` lies at byte `i * size`, so reading or writing one
//! element is one load or store into the mapping, no syscall and no
//! allocation, and any Zarr v3 reader (zarr-python) opens the array, also
//! while a run writes it. Every element access is bounds-checked: an index
//! outside the mapping reads as absent and writes nothing.
//!
//! ## Sparse, and safe on a full disk
//! A chunk whose fill value is zero is created as a sparse file (`set_len`),
//! so a store for 10^9 blocks costs no disk until blocks are marked. A store
//! through the mapping into a hole needs a disk block the disk may no
//! longer have, and the kernel answers that with SIGBUS, which kills the
//! driver without a word. So before the first write into each window of
//! [`RESERVE_WINDOW`] bytes, the window's disk blocks are reserved with the
//! `fallocate` syscall: a full disk is then a failed reservation, kept as
//! the array's [`failure`](MappedArray::failure) (the write is skipped, and
//! the run stops with that error at once, see `Scheduler::tracking_failure`),
//! never SIGBUS. One syscall per window (2 µs), nothing per mark after.
//!
//! Reading a hole through a shared mapping is not safe everywhere either:
//! tmpfs (a node-local `/tmp`, `/dev/shm`) gives a page even to a read, and
//! a full one answers with SIGBUS. So the array learns, when it is mapped,
//! which windows have disk blocks (`lseek` with `SEEK_HOLE`/`SEEK_DATA`):
//! only those, and those it reserved since, are read through the mapping.
//! A window that is one hole reads as the zeros it holds, without a
//! syscall; one partly written by another program is read with `pread`,
//! which never allocates.
//!
//! ## Sparse with any fill value: one shard
//! A hole reads as zeros, so only an array whose fill value is zero can
//! leave its holes for a reader to fill. The resource-tracking arrays hold
//! NaN or "no worker" for a block never measured, and written out in full
//! they cost half a store's disk before its first block ran. Their file is
//! one Zarr v3 shard instead ([`ChunkFormat::Sharded`]): the array's rows
//! cut into inner chunks of about one [`RESERVE_WINDOW`], each at its fixed
//! place (element `i` still at byte `i * size`), then the shard index, 16
//! bytes per inner chunk. An inner chunk absent from the index reads as
//! the fill value in any Zarr v3 reader and costs no disk; the first write
//! into one reserves it, writes the fill value into it and enters it in the
//! index. A store written before (one plain chunk written in full) is read
//! as it is.

use crate::error::DaisyError;
use crate::geometry::Coord;
use memmap2::MmapMut;
use serde_json::json;
use std::fs;
use std::path::{Path, PathBuf};
use zarrs_metadata::v3::{ArrayMetadataV3, MetadataV3};

/// An I/O error on `path`, as the core reports it.
pub fn io_err(path: &Path, e: std::io::Error) -> DaisyError {
    DaisyError::Io(format!("{}: {e}", path.display()))
}

/// An element type of a tracking array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElementType {
    /// `uint8`
    U8,
    /// `uint32`
    U32,
    /// `uint64`
    U64,
    /// `float32`
    F32,
    /// `float64`
    F64,
}

impl ElementType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            ElementType::U8 => 1,
            ElementType::U32 | ElementType::F32 => 4,
            ElementType::U64 | ElementType::F64 => 8,
        }
    }

    /// The Zarr v3 `data_type` name.
    pub fn zarr_name(self) -> &'static str {
        match self {
            ElementType::U8 => "uint8",
            ElementType::U32 => "uint32",
            ElementType::U64 => "uint64",
            ElementType::F32 => "float32",
            ElementType::F64 => "float64",
        }
    }
}

/// What one tracking array holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArrayKind {
    /// Directory name inside the group.
    pub name: &'static str,
    /// Element type.
    pub dtype: ElementType,
    /// Value of cells never written, as little-endian bytes.
    pub fill: [u8; 8],
}

/// How the one file of an array lays out its elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkFormat {
    /// Element `i` at byte `i * size` and nothing else: a hole reads as
    /// zeros (the fill value of the arrays made so).
    Plain,
    /// One shard of `count` inner chunks of `rows` rows (`window` bytes)
    /// each at its fixed place (element `i` at byte `i * size`; the last
    /// inner chunk padded past the array's end), then the shard index:
    /// per inner chunk its offset and length, or two `u64::MAX` for one
    /// never written, which reads as the fill value (see the module docs).
    Sharded {
        /// Rows of the array (along its first axis) per inner chunk.
        rows: u64,
        /// Bytes per inner chunk.
        window: u64,
        /// Inner chunks.
        count: u64,
    },
}

/// Bytes of one shard-index entry: offset and length, `u64` each.
const INDEX_ENTRY: u64 = 16;

impl ChunkFormat {
    /// The format a new array of `kind` gets: plain where its fill value is
    /// zero (a hole is the fill value), one shard otherwise.
    pub fn for_kind(kind: &ArrayKind, shape: &Coord) -> Self {
        let size = kind.dtype.size();
        if kind.fill[..size].iter().all(|&b| b == 0) {
            return ChunkFormat::Plain;
        }
        let dims = shape.as_slice();
        let first = dims.first().map_or(1, |&d| d.max(1) as u64);
        let rest: u64 = dims.iter().skip(1).map(|&d| d.max(1) as u64).product();
        let per_window = (RESERVE_WINDOW / size as u64).max(1);
        let rows = (per_window / rest.max(1)).clamp(1, first);
        ChunkFormat::Sharded {
            rows,
            window: rows * rest * size as u64,
            count: first.div_ceil(rows),
        }
    }

    /// Which format a file of `len` bytes holding an array of `kind` and
    /// `shape` has; None for neither (a damaged store).
    pub fn of_file(kind: &ArrayKind, shape: &Coord, len: u64) -> Option<Self> {
        let sharded = Self::for_kind(kind, shape);
        if len == sharded.file_len(kind, shape) {
            Some(sharded)
        } else if len == ChunkFormat::Plain.file_len(kind, shape) {
            Some(ChunkFormat::Plain)
        } else {
            None
        }
    }

    /// Bytes of the file.
    pub fn file_len(self, kind: &ArrayKind, shape: &Coord) -> u64 {
        match self {
            ChunkFormat::Plain => shape.product() * kind.dtype.size() as u64,
            ChunkFormat::Sharded { window, count, .. } => count * (window + INDEX_ENTRY),
        }
    }

    /// Bytes reserved (and, sharded, entered in the index) at once.
    fn window(self) -> u64 {
        match self {
            ChunkFormat::Plain => RESERVE_WINDOW,
            ChunkFormat::Sharded { window, .. } => window,
        }
    }

    /// Where the shard index starts (sharded only).
    fn index_at(self) -> Option<u64> {
        match self {
            ChunkFormat::Plain => None,
            ChunkFormat::Sharded { window, count, .. } => Some(window * count),
        }
    }
}

/// One array of a store, mapped (no mapping for an empty array).
pub struct MappedArray {
    kind: ArrayKind,
    format: ChunkFormat,
    /// Elements of the array (a shard's file holds more: its padding and
    /// index).
    elements: u64,
    map: Option<MmapMut>,
    /// The chunk, for reserving its windows and reading holes.
    file: Option<fs::File>,
    chunk: PathBuf,
    /// What is known of each window of the chunk (a [`RESERVE_WINDOW`],
    /// or an inner chunk of a shard: see the module docs); a window past
    /// the end is a [`Window::Hole`].
    windows: Vec<Window>,
    /// The first reservation that failed (a full disk): what the run stops
    /// with.
    failure: Option<String>,
}

/// What the array knows of one window's disk blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Window {
    /// Every byte has disk blocks (found so when mapped, or reserved
    /// since): read and written through the mapping.
    Backed,
    /// One hole: it reads as zeros (plain) or, an inner chunk absent from
    /// a shard's index, as the fill value; the first write reserves it
    /// (and fills it and enters it in the index).
    Hole,
    /// Some of it has disk blocks, some not (another program wrote it):
    /// read with `pread`; the first write reserves it.
    Partial,
}

/// The bytes of a chunk reserved at once, before the first write into
/// them: 1 MiB is a million done marks (a quarter million failure counts)
/// for one syscall, and the most a store grows beyond what it holds.
pub const RESERVE_WINDOW: u64 = 1 << 20;

/// A fixed-size little-endian element a [`MappedArray`] holds.
pub trait Element: Copy {
    /// Its size in bytes.
    const SIZE: usize;
    /// Decode from exactly `SIZE` bytes.
    fn read(bytes: &[u8]) -> Self;
    /// Encode into exactly `SIZE` bytes.
    fn write(self, bytes: &mut [u8]);
}

macro_rules! element {
    ($($t:ty),*) => {$(
        impl Element for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            fn read(bytes: &[u8]) -> Self {
                let mut b = [0u8; std::mem::size_of::<$t>()];
                b.copy_from_slice(bytes);
                <$t>::from_le_bytes(b)
            }
            fn write(self, bytes: &mut [u8]) {
                bytes.copy_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}

element!(u8, u32, u64, f32, f64);

impl MappedArray {
    /// What the array holds.
    pub fn kind(&self) -> &ArrayKind {
        &self.kind
    }

    fn slot(&self, index: u64, size: usize) -> Option<std::ops::Range<usize>> {
        (size == self.kind.dtype.size() && index < self.elements).then_some(())?;
        let start = usize::try_from(index).ok()?.checked_mul(size)?;
        Some(start..start.checked_add(size)?)
    }

    /// Element `index`; None outside the array (or for a wrong type).
    /// Never touches a hole through the mapping (see the module docs).
    #[inline]
    pub fn get<T: Element>(&self, index: u64) -> Option<T> {
        let range = self.slot(index, T::SIZE)?;
        let map = self.map.as_ref()?;
        if range.end > map.len() {
            return None;
        }
        match self.window(range.start as u64) {
            Window::Backed => map.get(range).map(T::read),
            Window::Hole => Some(T::read(&self.hole()[..T::SIZE])),
            Window::Partial => self.pread(range).map(|b| T::read(&b[..T::SIZE])),
        }
    }

    /// What is known of the window holding byte `at`.
    #[inline]
    fn window(&self, at: u64) -> Window {
        let w = (at / self.format.window()) as usize;
        self.windows.get(w).copied().unwrap_or(Window::Hole)
    }

    /// What an element of a [`Window::Hole`] reads as.
    fn hole(&self) -> [u8; 8] {
        match self.format {
            ChunkFormat::Plain => [0; 8],
            ChunkFormat::Sharded { .. } => self.kind.fill,
        }
    }

    /// Bytes `range` of the chunk read from the file (at most 8), for a
    /// window the mapping must not read.
    #[cold]
    fn pread(&self, range: std::ops::Range<usize>) -> Option<[u8; 8]> {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 8];
        let len = range.len().min(8);
        self.file
            .as_ref()?
            .read_exact_at(&mut buf[..len], range.start as u64)
            .ok()?;
        Some(buf)
    }

    /// How many elements are not all zero bytes (a done mark, a failure
    /// count: arrays whose holes are zeros), reading no hole through the
    /// mapping.
    pub fn count_nonzero(&self) -> u64 {
        let Some(map) = self.map.as_ref() else {
            return 0;
        };
        if self.format != ChunkFormat::Plain {
            return 0;
        }
        let size = self.kind.dtype.size();
        let window = RESERVE_WINDOW as usize;
        let mut count = 0u64;
        // only a window another program wrote in part is read into it
        let mut buf = Vec::new();
        for (w, start) in (0..map.len()).step_by(window).enumerate() {
            let end = (start + window).min(map.len());
            let bytes: &[u8] = match self.windows.get(w).copied().unwrap_or(Window::Hole) {
                Window::Backed => &map[start..end],
                Window::Hole => continue,
                Window::Partial => {
                    use std::os::unix::fs::FileExt;
                    let Some(file) = self.file.as_ref() else {
                        continue;
                    };
                    buf.resize(window, 0);
                    if file
                        .read_exact_at(&mut buf[..end - start], start as u64)
                        .is_err()
                    {
                        continue;
                    }
                    &buf[..end - start]
                }
            };
            count += bytes
                .chunks_exact(size)
                .filter(|e| e.iter().any(|&b| b != 0))
                .count() as u64;
        }
        count
    }

    /// Set element `index`; nothing outside the array (or for a wrong
    /// type), nor where its window's disk blocks could not be reserved (see
    /// the module docs). One store into the mapping.
    #[inline]
    pub fn set<T: Element>(&mut self, index: u64, value: T) {
        if let Some(range) = self.slot(index, T::SIZE)
            && self.reserve_window(range.start as u64)
            && let Some(bytes) = self.map.as_mut().and_then(|m| m.get_mut(range))
        {
            value.write(bytes);
        }
    }

    /// Reserve the disk blocks of the window holding byte `at` unless they
    /// are; false if that failed (now or before).
    #[inline]
    fn reserve_window(&mut self, at: u64) -> bool {
        if self.window(at) == Window::Backed {
            return true;
        }
        self.reserve_slow(at / self.format.window())
    }

    #[cold]
    fn reserve_slow(&mut self, window: u64) -> bool {
        if self.failure.is_some() {
            return false;
        }
        let (Some(file), Some(map)) = (&self.file, &self.map) else {
            return false;
        };
        let size = self.format.window();
        let start = window * size;
        let data_end = self.format.index_at().unwrap_or(map.len() as u64);
        let len = size.min(data_end.saturating_sub(start));
        let w = window as usize;
        let was = self.windows.get(w).copied().unwrap_or(Window::Hole);
        let reserved = reserve(file, start, len).and_then(|()| match self.format.index_at() {
            Some(index) if was == Window::Hole => self.enter(window, index),
            _ => Ok(()),
        });
        match reserved {
            Ok(()) => {
                if w >= self.windows.len() {
                    self.windows.resize(w + 1, Window::Hole);
                }
                self.windows[w] = Window::Backed;
                true
            }
            Err(e) => {
                self.failure = Some(format!(
                    "{}: could not reserve disk space for the tracking store's {:?} array: \
                     {e}. The marks of blocks finished from now on could not be kept, so the \
                     run stops here; free space on that disk (or put the tracking stores on \
                     another one: daisy.set_tracking_basedir) and rerun: blocks already \
                     marked are skipped",
                    self.chunk.display(),
                    self.kind.name
                ));
                false
            }
        }
    }

    /// Make the reserved inner chunk `window` of a shard hold the fill
    /// value and enter it in the shard's index (at byte `index`): after
    /// this any reader finds it, and it reads as before.
    #[cold]
    fn enter(&mut self, window: u64, index: u64) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        let size = self.kind.dtype.size();
        let len = self.format.window();
        let start = window * len;
        let fill = self.kind.fill;
        let map = self
            .map
            .as_mut()
            .ok_or_else(|| std::io::Error::other("not mapped"))?;
        let bytes = map
            .get_mut(start as usize..(start + len) as usize)
            .ok_or_else(|| std::io::Error::other("inner chunk outside the file"))?;
        for element in bytes.chunks_exact_mut(size) {
            element.copy_from_slice(&fill[..size]);
        }
        let mut entry = [0u8; INDEX_ENTRY as usize];
        entry[..8].copy_from_slice(&start.to_le_bytes());
        entry[8..].copy_from_slice(&len.to_le_bytes());
        let file = self
            .file
            .as_ref()
            .ok_or_else(|| std::io::Error::other("not open"))?;
        file.write_all_at(&entry, index + window * INDEX_ENTRY)
    }

    /// Why a write into the array could not be kept (a full disk), if so.
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    /// Write dirty pages to disk.
    pub fn flush(&self, path: &Path) -> Result<(), DaisyError> {
        match &self.map {
            Some(m) => m.flush().map_err(|e| io_err(path, e)),
            None => Ok(()),
        }
    }
}

/// The path of the single chunk of an array of `dims` dimensions in `dir`
/// (`c/0/../0`, Zarr v3's default chunk key encoding).
pub fn chunk_path(dir: &Path, dims: usize) -> PathBuf {
    let mut p = dir.join("c");
    for _ in 0..dims {
        p = p.join("0");
    }
    p
}

fn array_metadata(
    kind: &ArrayKind,
    shape: &Coord,
    format: ChunkFormat,
) -> Result<String, DaisyError> {
    let shape_u: Vec<u64> = shape.as_slice().iter().map(|&s| s.max(0) as u64).collect();
    let mut chunk: Vec<u64> = shape_u.iter().map(|&s| s.max(1)).collect();
    let bytes = json!({ "name": "bytes", "configuration": { "endian": "little" } });
    let codec_json = match format {
        ChunkFormat::Plain => bytes,
        ChunkFormat::Sharded { rows, count, .. } => {
            let mut inner = chunk.clone();
            inner[0] = rows;
            chunk[0] = rows * count;
            json!({
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": inner,
                    "codecs": [bytes],
                    "index_codecs": [bytes],
                    "index_location": "end",
                },
            })
        }
    };
    let grid = MetadataV3::new_with_serializable_configuration(
        "regular".to_string(),
        &json!({ "chunk_shape": chunk }),
    )
    .map_err(|e| DaisyError::Io(e.to_string()))?;
    let codec: MetadataV3 =
        serde_json::from_value(codec_json).map_err(|e| DaisyError::Io(e.to_string()))?;
    let fill = match kind.dtype {
        ElementType::F32 | ElementType::F64 => {
            let v = if kind.dtype == ElementType::F32 {
                f32::from_le_bytes(kind.fill[..4].try_into().unwrap_or_default()) as f64
            } else {
                f64::from_le_bytes(kind.fill)
            };
            if v.is_nan() {
                zarrs_metadata::v3::FillValueMetadataV3::from("NaN")
            } else {
                zarrs_metadata::v3::FillValueMetadataV3::from(v)
            }
        }
        _ => zarrs_metadata::v3::FillValueMetadataV3::from(u64::from_le_bytes(kind.fill)),
    };
    let meta = ArrayMetadataV3::new(
        shape_u,
        grid,
        MetadataV3::new(kind.dtype.zarr_name()),
        fill,
        vec![codec],
    );
    serde_json::to_string_pretty(&meta).map_err(|e| DaisyError::Io(e.to_string()))
}

/// The extension of daisy's temporary files in a store (written, then
/// renamed into place).
pub const TEMP_EXTENSION: &str = "daisy-tmp";

/// Write `bytes` to `path` atomically (temporary file, then rename).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), DaisyError> {
    let tmp = path.with_extension(TEMP_EXTENSION);
    fs::write(&tmp, bytes).map_err(|e| io_err(&tmp, e))?;
    fs::rename(&tmp, path).map_err(|e| io_err(path, e))
}

/// Write (or replace) the metadata of one array of `shape` whose chunk has
/// `format`, leaving the chunk as it is.
pub fn write_array_metadata(
    store: &Path,
    kind: &ArrayKind,
    shape: &Coord,
    format: ChunkFormat,
) -> Result<(), DaisyError> {
    write_atomic(
        &store.join(kind.name).join("zarr.json"),
        array_metadata(kind, shape, format)?.as_bytes(),
    )
}

/// Create (or replace) one array: metadata and a chunk of `contents` (every
/// element, C order), in the format of a new array of `kind`; a shard
/// enters only the inner chunks that hold more than the fill value.
pub fn write_array(
    store: &Path,
    kind: &ArrayKind,
    shape: &Coord,
    contents: &[u8],
) -> Result<(), DaisyError> {
    let dir = store.join(kind.name);
    let chunk = chunk_path(&dir, shape.dims());
    if let Some(parent) = chunk.parent() {
        fs::create_dir_all(parent).map_err(|e| io_err(parent, e))?;
    }
    let format = ChunkFormat::for_kind(kind, shape);
    if !contents.is_empty() {
        match format {
            ChunkFormat::Plain => write_atomic(&chunk, contents)?,
            ChunkFormat::Sharded { window, count, .. } => {
                let tmp = chunk.with_extension("daisy-tmp");
                write_shard(&tmp, kind, contents, window, count).map_err(|e| io_err(&tmp, e))?;
                fs::rename(&tmp, &chunk).map_err(|e| io_err(&chunk, e))?;
            }
        }
    }
    write_array_metadata(store, kind, shape, format)
}

/// Write `contents` to `path` as one shard of `count` inner chunks of
/// `window` bytes (see [`ChunkFormat::Sharded`]): an inner chunk that holds
/// only the fill value is left out (a hole, absent from the index).
fn write_shard(
    path: &Path,
    kind: &ArrayKind,
    contents: &[u8],
    window: u64,
    count: u64,
) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let size = kind.dtype.size();
    let fill = &kind.fill[..size];
    let file = fs::File::create(path)?;
    file.set_len(count * (window + INDEX_ENTRY))?;
    let mut index = Vec::with_capacity((count * INDEX_ENTRY) as usize);
    for w in 0..count {
        let start = (w * window) as usize;
        let end = (start + window as usize).min(contents.len());
        let part = contents.get(start..end).unwrap_or(&[]);
        if part.chunks_exact(size).all(|e| e == fill) {
            index.extend_from_slice(&[0xff; INDEX_ENTRY as usize]);
            continue;
        }
        let mut bytes = part.to_vec();
        while bytes.len() < window as usize {
            bytes.extend_from_slice(fill);
        }
        file.write_all_at(&bytes, start as u64)?;
        index.extend_from_slice(&(start as u64).to_le_bytes());
        index.extend_from_slice(&window.to_le_bytes());
    }
    file.write_all_at(&index, count * window)?;
    file.sync_all()
}

/// Create (or replace) one array holding its fill value everywhere. Its
/// file is sized with `set_len` and no element is written (a shard writes
/// its index, every inner chunk absent), so a store for 10^6 blocks is
/// created in no time and stays sparse: its disk blocks are reserved window
/// by window as marks are written (see the module docs).
pub fn create_array(store: &Path, kind: &ArrayKind, shape: &Coord) -> Result<(), DaisyError> {
    let n = shape.product();
    let size = kind.dtype.size();
    if n == 0 {
        return write_array(store, kind, shape, &[]);
    }
    let format = ChunkFormat::for_kind(kind, shape);
    let dir = store.join(kind.name);
    let chunk = chunk_path(&dir, shape.dims());
    if let Some(parent) = chunk.parent() {
        fs::create_dir_all(parent).map_err(|e| io_err(parent, e))?;
    }
    let tmp = chunk.with_extension("daisy-tmp");
    let too_big = || {
        DaisyError::Io(format!(
            "{}: the tracking store's array {:?} would hold {n} elements (one per block) of \
             {size} bytes, more than one file may hold on this filesystem; a block grid this \
             large cannot be tracked: use a larger write_roi (fewer blocks), or \
             tracking_path=False for this task",
            chunk.display(),
            kind.name
        ))
    };
    n.checked_mul(size as u64).ok_or_else(too_big)?;
    let bytes = format.file_len(kind, shape);
    fs::File::create(&tmp)
        .and_then(|f| {
            f.set_len(bytes)?;
            match format.index_at() {
                Some(at) => {
                    use std::os::unix::fs::FileExt;
                    f.write_all_at(&vec![0xff; (bytes - at) as usize], at)
                }
                None => Ok(()),
            }
        })
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::EFBIG) || e.kind() == std::io::ErrorKind::InvalidInput
            {
                let _ = fs::remove_file(&tmp);
                too_big()
            } else {
                io_err(&tmp, e)
            }
        })?;
    fs::rename(&tmp, &chunk).map_err(|e| io_err(&chunk, e))?;
    write_array_metadata(store, kind, shape, format)
}

/// Give `len` bytes of a chunk from `start` their disk blocks before they
/// are written through the mapping (see the module docs). Blocks already
/// allocated cost nothing to reserve again (2 µs for a 4 MB chunk). The
/// `fallocate` syscall itself, not glibc's `posix_fallocate`: on a
/// filesystem that cannot reserve (NFSv3, some FUSE mounts) the latter
/// falls back to touching every 4 KiB page with a read and a write, a
/// round trip each over the network; there the syscall says EOPNOTSUPP and
/// the chunk is left as it is.
fn reserve(file: &fs::File, start: u64, len: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let start = libc::off_t::try_from(start).map_err(std::io::Error::other)?;
    let len = libc::off_t::try_from(len).map_err(std::io::Error::other)?;
    // SAFETY: a plain syscall on an open descriptor this function borrows
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, start, len) };
    if rc == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => Ok(()),
        _ => Err(e),
    }
}

/// `n` elements of `kind`'s fill value, little-endian.
pub fn filled(kind: &ArrayKind, n: u64) -> Vec<u8> {
    let size = kind.dtype.size();
    let mut v = Vec::with_capacity(n as usize * size);
    for _ in 0..n {
        v.extend_from_slice(&kind.fill[..size]);
    }
    v
}

/// Map one array of `store`, creating it filled where it is missing; a
/// chunk of the wrong size is a damaged store.
pub fn map_array(store: &Path, kind: ArrayKind, shape: &Coord) -> Result<MappedArray, DaisyError> {
    let n = shape.product();
    let dir = store.join(kind.name);
    let chunk = chunk_path(&dir, shape.dims());
    if n == 0 {
        return Ok(MappedArray {
            kind,
            format: ChunkFormat::Plain,
            elements: 0,
            map: None,
            file: None,
            chunk,
            windows: Vec::new(),
            failure: None,
        });
    }
    if !dir.join("zarr.json").is_file() || !chunk.is_file() {
        create_array(store, &kind, shape)?;
    }
    let file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&chunk)
        .map_err(|e| io_err(&chunk, e))?;
    let len = file.metadata().map_err(|e| io_err(&chunk, e))?.len();
    let damaged = |what: String| {
        DaisyError::Io(format!(
            "{}: {what}; the store is damaged: delete it (rm -rf {}) to start fresh",
            chunk.display(),
            store.display()
        ))
    };
    let format = ChunkFormat::of_file(&kind, shape, len).ok_or_else(|| {
        let expected = ChunkFormat::for_kind(&kind, shape).file_len(&kind, shape);
        damaged(format!("chunk holds {len} bytes, expected {expected}"))
    })?;
    let windows = match format {
        ChunkFormat::Plain => window_states(&file, len, RESERVE_WINDOW),
        ChunkFormat::Sharded { window, count, .. } => {
            shard_windows(&file, window, count).map_err(damaged)?
        }
    };
    // SAFETY: the file is daisy's own chunk, opened read-write; only this
    // process maps it for writing (one server per run), and every access
    // goes through bounds-checked slices of the mapping.
    let map = unsafe { MmapMut::map_mut(&file) }.map_err(|e| io_err(&chunk, e))?;
    Ok(MappedArray {
        kind,
        format,
        elements: n,
        map: Some(map),
        file: Some(file),
        chunk,
        windows,
        failure: None,
    })
}

/// The shard index of a file of `count` inner chunks of `window` bytes:
/// its entries, each None (absent) or at the inner chunk's own place; an
/// entry elsewhere is not daisy's layout (the error says which).
fn read_index(file: &fs::File, window: u64, count: u64) -> Result<Vec<bool>, String> {
    use std::os::unix::fs::FileExt;
    let mut index = vec![0u8; (count * INDEX_ENTRY) as usize];
    file.read_exact_at(&mut index, count * window)
        .map_err(|e| format!("its shard index cannot be read: {e}"))?;
    let mut present = Vec::with_capacity(count as usize);
    for (w, entry) in index.chunks_exact(INDEX_ENTRY as usize).enumerate() {
        let word = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&entry[at..at + 8]);
            u64::from_le_bytes(b)
        };
        let (offset, len) = (word(0), word(8));
        if (offset, len) == (u64::MAX, u64::MAX) {
            present.push(false);
        } else if (offset, len) == (w as u64 * window, window) {
            present.push(true);
        } else {
            return Err(format!(
                "its shard index puts inner chunk {w} at byte {offset} ({len} bytes), not \
                 where daisy writes it ({} bytes at {})",
                window,
                w as u64 * window
            ));
        }
    }
    Ok(present)
}

/// What each inner chunk of a shard has: absent from the index, a hole
/// (reads as the fill value); entered, what its disk blocks are (a hole
/// there is read with `pread`, as zeros, never through the mapping).
fn shard_windows(file: &fs::File, window: u64, count: u64) -> Result<Vec<Window>, String> {
    let present = read_index(file, window, count)?;
    let disk = window_states(file, window * count, window);
    Ok(present
        .iter()
        .zip(disk)
        .map(|(&entered, state)| match (entered, state) {
            (false, _) => Window::Hole,
            (true, Window::Hole) => Window::Partial,
            (true, state) => state,
        })
        .collect())
}

/// What each `window` bytes of a file of `len` bytes has of disk
/// blocks, from `lseek`'s `SEEK_DATA`/`SEEK_HOLE` (a file system that does
/// not know its holes says it has none: every window is then backed, as
/// on such a file system reading a hole allocates nothing).
fn window_states(file: &fs::File, len: u64, window: u64) -> Vec<Window> {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    let seek = |at: u64, whence: libc::c_int| -> Option<u64> {
        let at = libc::off_t::try_from(at).ok()?;
        // SAFETY: lseek on a descriptor this function borrows; the file
        // offset it moves is not used by anything else (reads are pread)
        let to = unsafe { libc::lseek(fd, at, whence) };
        u64::try_from(to).ok()
    };
    let n = len.div_ceil(window) as usize;
    let mut windows = Vec::with_capacity(n);
    for w in 0..n as u64 {
        let (start, end) = (w * window, ((w + 1) * window).min(len));
        let data = seek(start, libc::SEEK_DATA);
        let state = match data {
            // no data from here on (ENXIO), or none before the window ends
            None => Window::Hole,
            Some(d) if d >= end => Window::Hole,
            Some(d) if d > start => Window::Partial,
            Some(_) => match seek(start, libc::SEEK_HOLE) {
                Some(h) if h >= end => Window::Backed,
                _ => Window::Partial,
            },
        };
        windows.push(state);
    }
    windows
}

/// An array read back whole, for readers outside a run (the CLI, the HTML
/// report): its shape and its chunk, little-endian elements of its kind.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredArray {
    /// What the array holds.
    pub kind: ArrayKind,
    /// Its shape, from its metadata.
    pub shape: Vec<u64>,
    /// The chunk: every element, C order, little-endian.
    pub bytes: Vec<u8>,
}

/// Read one array of `store` whole; None when the store has no such array
/// (or its chunk was never written). Metadata of another type or a chunk
/// of the wrong size is an error naming the file.
pub fn read_array(store: &Path, kind: ArrayKind) -> Result<Option<StoredArray>, DaisyError> {
    let dir = store.join(kind.name);
    let meta_path = dir.join("zarr.json");
    if !meta_path.is_file() {
        return Ok(None);
    }
    let text = fs::read_to_string(&meta_path).map_err(|e| io_err(&meta_path, e))?;
    let damaged = |what: &str| {
        DaisyError::Io(format!(
            "{}: {what}; the tracking store is damaged",
            meta_path.display()
        ))
    };
    let meta: serde_json::Value = serde_json::from_str(&text).map_err(|_| damaged("not JSON"))?;
    if meta["data_type"].as_str() != Some(kind.dtype.zarr_name()) {
        return Err(damaged(&format!(
            "data_type is {}, expected {}",
            meta["data_type"],
            kind.dtype.zarr_name()
        )));
    }
    let shape: Vec<u64> = meta["shape"]
        .as_array()
        .and_then(|a| a.iter().map(serde_json::Value::as_u64).collect())
        .ok_or_else(|| damaged("no shape"))?;
    let n: u64 = shape.iter().product();
    if n == 0 {
        return Ok(Some(StoredArray {
            kind,
            shape,
            bytes: Vec::new(),
        }));
    }
    let chunk = chunk_path(&dir, shape.len());
    if !chunk.is_file() {
        return Ok(None);
    }
    let coord = Coord::new(&shape.iter().map(|&s| s as i64).collect::<Vec<_>>())
        .map_err(|_| damaged("its shape is not a block grid's"))?;
    let bytes = read_elements(&chunk, &kind, &coord)?
        .map_err(|what| damaged(&format!("its chunk {}: {what}", chunk.display())))?;
    Ok(Some(StoredArray { kind, shape, bytes }))
}

/// Every element of the array of `kind` and `shape` whose chunk is the
/// file `chunk`, C order, little-endian, in either [`ChunkFormat`] (an
/// inner chunk absent from a shard reads as the fill value). `Err` for an
/// I/O error; `Ok(Err(what))` for a file of neither format.
pub fn read_elements(
    chunk: &Path,
    kind: &ArrayKind,
    shape: &Coord,
) -> Result<Result<Vec<u8>, String>, DaisyError> {
    let mut bytes = fs::read(chunk).map_err(|e| io_err(chunk, e))?;
    let n = (shape.product() * kind.dtype.size() as u64) as usize;
    match ChunkFormat::of_file(kind, shape, bytes.len() as u64) {
        None => Ok(Err(format!(
            "it holds {} bytes, expected {}",
            bytes.len(),
            ChunkFormat::for_kind(kind, shape).file_len(kind, shape)
        ))),
        Some(ChunkFormat::Plain) => Ok(Ok(bytes)),
        Some(ChunkFormat::Sharded { window, count, .. }) => {
            let file = fs::File::open(chunk).map_err(|e| io_err(chunk, e))?;
            let present = match read_index(&file, window, count) {
                Ok(p) => p,
                Err(what) => return Ok(Err(what)),
            };
            let size = kind.dtype.size();
            for (w, entered) in present.into_iter().enumerate() {
                if entered {
                    continue;
                }
                let start = w * window as usize;
                for element in bytes[start..start + window as usize].chunks_exact_mut(size) {
                    element.copy_from_slice(&kind.fill[..size]);
                }
            }
            bytes.truncate(n);
            Ok(Ok(bytes))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIND: ArrayKind = ArrayKind {
        name: "counts",
        dtype: ElementType::U32,
        fill: [7, 0, 0, 0, 0, 0, 0, 0],
    };

    #[test]
    fn an_array_is_created_filled_and_written_through_its_mapping() {
        let dir = std::env::temp_dir().join(format!("daisy-zarr-array-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let shape = Coord::new(&[2, 3]).unwrap();
        {
            let mut a = map_array(&dir, KIND, &shape).unwrap();
            assert_eq!(a.get::<u32>(5), Some(7), "fill value");
            assert_eq!(a.get::<u32>(6), None, "outside");
            assert_eq!(a.get::<u64>(0), None, "wrong type");
            a.set(4u64, 99u32);
            a.set(6u64, 1u32); // outside: ignored
            a.set(0u64, 1u64); // wrong type: ignored
            a.flush(&dir).unwrap();
        }
        // one shard (the fill value is not zero) of one inner chunk: the
        // six elements, then the index entry (offset 0, 24 bytes)
        let chunk = fs::read(chunk_path(&dir.join("counts"), 2)).unwrap();
        assert_eq!(chunk.len(), 24 + 16);
        assert_eq!(&chunk[16..20], &99u32.to_le_bytes());
        assert_eq!(&chunk[0..4], &7u32.to_le_bytes());
        assert_eq!(&chunk[24..32], &0u64.to_le_bytes());
        assert_eq!(&chunk[32..40], &24u64.to_le_bytes());
        let meta: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(dir.join("counts/zarr.json")).unwrap())
                .unwrap();
        assert_eq!(meta["shape"], json!([2, 3]));
        assert_eq!(meta["data_type"], "uint32");
        assert_eq!(meta["fill_value"], 7);
        let read = read_array(&dir, KIND).unwrap().unwrap();
        assert_eq!(read.shape, vec![2, 3]);
        assert_eq!(read.bytes, chunk[..24]);
        assert_eq!(meta["codecs"][0]["name"], "sharding_indexed");
        let other = ArrayKind {
            name: "counts",
            dtype: ElementType::F64,
            fill: [0; 8],
        };
        assert!(read_array(&dir, other).is_err(), "another type is refused");
        let absent = ArrayKind {
            name: "absent",
            ..KIND
        };
        assert_eq!(read_array(&dir, absent).unwrap(), None);
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A sparse array learns its holes when mapped: a hole reads as zeros
    /// without touching the mapping, a window another program wrote part
    /// of is read with pread, and a write reserves its window first.
    #[test]
    fn holes_are_never_read_through_the_mapping() {
        use std::os::unix::fs::FileExt;
        let dir = std::env::temp_dir().join(format!("daisy-zarr-holes-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let kind = ArrayKind {
            name: "marks",
            dtype: ElementType::U8,
            fill: [0; 8],
        };
        // three windows and a bit
        let n = 3 * RESERVE_WINDOW + 10;
        let shape = Coord::new(&[n as i64]).unwrap();
        create_array(&dir, &kind, &shape).unwrap();
        // another program writes one byte in the middle of window 1
        let chunk = chunk_path(&dir.join("marks"), 1);
        let file = fs::OpenOptions::new().write(true).open(&chunk).unwrap();
        file.write_all_at(&[5], RESERVE_WINDOW + 12345).unwrap();
        drop(file);
        let mut a = map_array(&dir, kind, &shape).unwrap();
        // a file system without holes (or that fills them) backs them all
        let knows_holes = a.windows[0] == Window::Hole;
        if knows_holes {
            assert_eq!(a.windows[1], Window::Partial);
            assert_eq!(&a.windows[2..], &[Window::Hole, Window::Hole]);
        }
        assert_eq!(a.get::<u8>(7), Some(0));
        assert_eq!(a.get::<u8>(RESERVE_WINDOW + 12345), Some(5));
        assert_eq!(a.get::<u8>(RESERVE_WINDOW + 12346), Some(0));
        assert_eq!(a.count_nonzero(), 1);
        a.set(2 * RESERVE_WINDOW + 1, 1u8);
        assert_eq!(a.windows[2], Window::Backed, "a write reserves its window");
        assert_eq!(a.get::<u8>(2 * RESERVE_WINDOW + 1), Some(1));
        assert_eq!(a.count_nonzero(), 2);
        a.flush(&dir).unwrap();
        drop(a);
        // mapped again: the reserved window is backed, the others as before
        let a = map_array(&dir, kind, &shape).unwrap();
        assert_eq!(a.windows[2], Window::Backed);
        if knows_holes {
            assert_eq!((a.windows[0], a.windows[3]), (Window::Hole, Window::Hole));
        }
        assert_eq!(a.count_nonzero(), 2);
        fs::remove_dir_all(&dir).unwrap();
    }
}
