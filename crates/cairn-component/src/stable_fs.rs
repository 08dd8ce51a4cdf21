//! `wasi:filesystem/types` as a run sees it: wasmtime-wasi's own
//! implementation, except that what a host would answer differently on a
//! replay is made constant — the three timestamps of a `stat` are absent
//! (`none`; Rust's `Metadata::modified` then reports them unsupported), and
//! the metadata hash is a digest of the object's type, size and link count
//! rather than of its device, inode and times; a directory lists its
//! entries sorted by name, whatever order the host's filesystem keeps
//! (ext4, tmpfs and the browser's in-memory tree differ). A guest that
//! reads them replays the same (`cairn replay` matches). Writes that grow the
//! worktree are charged to the run's budget first ([`super::metered`]);
//! everything else is delegated unchanged.

use sha2::{Digest, Sha256};
use std::sync::Arc;
use wasmtime::component::{HasData, Resource};
use wasmtime_wasi::filesystem::{Descriptor, WasiFilesystemCtxView};
use wasmtime_wasi::p2::bindings::filesystem::types::{
    self, HostDescriptor, HostDirectoryEntryStream,
};
use wasmtime_wasi::p2::{DynInputStream, DynOutputStream, FsError, FsResult};

/// The view a run's filesystem calls go through, and the run's worktree
/// meter (none for a describe).
pub struct StableFs<'a>(
    pub WasiFilesystemCtxView<'a>,
    pub Option<Arc<crate::worktree::ArtifactMeter>>,
    pub Listings,
);

/// The entries of each open directory stream, read whole when it opened
/// and sorted by name (by the stream's resource handle).
pub type Listings = Arc<
    std::sync::Mutex<
        std::collections::HashMap<u32, std::collections::VecDeque<FsResult<types::DirectoryEntry>>>,
    >,
>;

/// A metered run's file: its meter, the file, its size when looked at.
type MeteredFile = (Arc<crate::worktree::ArtifactMeter>, Arc<std::fs::File>, u64);

impl StableFs<'_> {
    /// The file behind `fd` and its size now, when the run is metered.
    fn metered_file(&mut self, fd: &Resource<types::Descriptor>) -> FsResult<Option<MeteredFile>> {
        let Some(meter) = self.1.clone() else {
            return Ok(None);
        };
        let Descriptor::File(f) = self.0.table.get(fd)? else {
            return Ok(None);
        };
        let file = f.file.clone();
        let size = file.metadata().map_err(FsError::from)?.len();
        Ok(Some((meter, file, size)))
    }

    /// Put `stream` back in the table wrapped so its writes are charged.
    fn meter_stream(
        &mut self,
        stream: Resource<DynOutputStream>,
        metered: Option<MeteredFile>,
        offset: Option<u64>,
    ) -> FsResult<Resource<DynOutputStream>> {
        let Some((meter, file, _)) = metered else {
            return Ok(stream);
        };
        let inner = self.0.table.delete(stream)?;
        let wrapped: DynOutputStream =
            Box::new(super::metered::Metered::at(inner, file, meter, offset));
        Ok(self.0.table.push(wrapped)?)
    }
}

/// The `HasData` of [`StableFs`] for `add_to_linker`.
pub struct StableFsData;

impl HasData for StableFsData {
    type Data<'a> = StableFs<'a>;
}

fn stable(mut stat: types::DescriptorStat) -> types::DescriptorStat {
    stat.data_access_timestamp = None;
    stat.data_modification_timestamp = None;
    stat.status_change_timestamp = None;
    stat
}

/// The descriptor type as the hash spells it (docs/replay.md): written out
/// here, not taken from a `Debug` impl a wasmtime upgrade could change.
fn type_name(t: types::DescriptorType) -> &'static str {
    use types::DescriptorType as T;
    match t {
        T::Unknown => "DescriptorType::Unknown",
        T::BlockDevice => "DescriptorType::BlockDevice",
        T::CharacterDevice => "DescriptorType::CharacterDevice",
        T::Directory => "DescriptorType::Directory",
        T::Fifo => "DescriptorType::Fifo",
        T::SymbolicLink => "DescriptorType::SymbolicLink",
        T::RegularFile => "DescriptorType::RegularFile",
        T::Socket => "DescriptorType::Socket",
    }
}

fn hash_of(stat: &types::DescriptorStat) -> types::MetadataHashValue {
    let mut h = Sha256::new();
    h.update(b"cairn metadata hash v1");
    h.update(type_name(stat.type_).as_bytes());
    h.update(stat.size.to_le_bytes());
    h.update(stat.link_count.to_le_bytes());
    let d = h.finalize();
    types::MetadataHashValue {
        lower: u64::from_le_bytes(d[0..8].try_into().expect("8 bytes")),
        upper: u64::from_le_bytes(d[8..16].try_into().expect("8 bytes")),
    }
}

impl types::Host for StableFs<'_> {
    fn convert_error_code(&mut self, err: FsError) -> wasmtime::Result<types::ErrorCode> {
        types::Host::convert_error_code(&mut self.0, err)
    }

    fn filesystem_error_code(
        &mut self,
        err: Resource<wasmtime::Error>,
    ) -> wasmtime::Result<Option<types::ErrorCode>> {
        types::Host::filesystem_error_code(&mut self.0, err)
    }
}

impl HostDescriptor for StableFs<'_> {
    async fn stat(&mut self, fd: Resource<types::Descriptor>) -> FsResult<types::DescriptorStat> {
        HostDescriptor::stat(&mut self.0, fd).await.map(stable)
    }

    async fn stat_at(
        &mut self,
        fd: Resource<types::Descriptor>,
        path_flags: types::PathFlags,
        path: String,
    ) -> FsResult<types::DescriptorStat> {
        HostDescriptor::stat_at(&mut self.0, fd, path_flags, path)
            .await
            .map(stable)
    }

    async fn metadata_hash(
        &mut self,
        fd: Resource<types::Descriptor>,
    ) -> FsResult<types::MetadataHashValue> {
        let stat = HostDescriptor::stat(&mut self.0, fd).await?;
        Ok(hash_of(&stat))
    }

    async fn metadata_hash_at(
        &mut self,
        fd: Resource<types::Descriptor>,
        path_flags: types::PathFlags,
        path: String,
    ) -> FsResult<types::MetadataHashValue> {
        let stat = HostDescriptor::stat_at(&mut self.0, fd, path_flags, path).await?;
        Ok(hash_of(&stat))
    }

    async fn advise(
        &mut self,
        fd: Resource<types::Descriptor>,
        offset: types::Filesize,
        len: types::Filesize,
        advice: types::Advice,
    ) -> FsResult<()> {
        HostDescriptor::advise(&mut self.0, fd, offset, len, advice).await
    }

    async fn sync_data(&mut self, fd: Resource<types::Descriptor>) -> FsResult<()> {
        HostDescriptor::sync_data(&mut self.0, fd).await
    }

    async fn get_flags(
        &mut self,
        fd: Resource<types::Descriptor>,
    ) -> FsResult<types::DescriptorFlags> {
        HostDescriptor::get_flags(&mut self.0, fd).await
    }

    async fn get_type(
        &mut self,
        fd: Resource<types::Descriptor>,
    ) -> FsResult<types::DescriptorType> {
        HostDescriptor::get_type(&mut self.0, fd).await
    }

    async fn set_size(
        &mut self,
        fd: Resource<types::Descriptor>,
        size: types::Filesize,
    ) -> FsResult<()> {
        // A sparse file counts its length: growing one is charged whole.
        let metered = self.metered_file(&fd)?;
        let grows = metered
            .as_ref()
            .map_or(0, |(_, _, was)| size.saturating_sub(*was));
        if let Some((meter, _, _)) = &metered
            && !meter.take(grows)
        {
            return Err(FsError::from(super::metered::no_space()));
        }
        let done = HostDescriptor::set_size(&mut self.0, fd, size).await;
        if let Some((meter, _, was)) = &metered {
            match &done {
                Err(_) => meter.give(grows),
                Ok(()) => meter.give(was.saturating_sub(size)),
            }
        }
        done
    }

    async fn set_times(
        &mut self,
        fd: Resource<types::Descriptor>,
        atim: types::NewTimestamp,
        mtim: types::NewTimestamp,
    ) -> FsResult<()> {
        HostDescriptor::set_times(&mut self.0, fd, atim, mtim).await
    }

    async fn read(
        &mut self,
        fd: Resource<types::Descriptor>,
        len: types::Filesize,
        offset: types::Filesize,
    ) -> FsResult<(Vec<u8>, bool)> {
        HostDescriptor::read(&mut self.0, fd, len, offset).await
    }

    async fn write(
        &mut self,
        fd: Resource<types::Descriptor>,
        buf: Vec<u8>,
        offset: types::Filesize,
    ) -> FsResult<types::Filesize> {
        let metered = self.metered_file(&fd)?;
        let grows = metered.as_ref().map_or(0, |(_, _, size)| {
            super::metered::growth(*size, offset, buf.len() as u64)
        });
        if let Some((meter, _, _)) = &metered
            && !meter.take(grows)
        {
            return Err(FsError::from(super::metered::no_space()));
        }
        let done = HostDescriptor::write(&mut self.0, fd, buf, offset).await;
        if let (Some((meter, _, _)), Err(_)) = (&metered, &done) {
            meter.give(grows);
        }
        done
    }

    async fn read_directory(
        &mut self,
        fd: Resource<types::Descriptor>,
    ) -> FsResult<Resource<types::DirectoryEntryStream>> {
        let stream = HostDescriptor::read_directory(&mut self.0, fd).await?;
        let mut entries = Vec::new();
        let mut failed = None;
        loop {
            let borrowed = Resource::new_borrow(stream.rep());
            match HostDirectoryEntryStream::read_directory_entry(&mut self.0, borrowed).await {
                Ok(Some(e)) => entries.push(e),
                Ok(None) => break,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        let mut queue: std::collections::VecDeque<FsResult<types::DirectoryEntry>> =
            entries.into_iter().map(Ok).collect();
        if let Some(e) = failed {
            queue.push_back(Err(e));
        }
        self.2
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(stream.rep(), queue);
        Ok(stream)
    }

    async fn sync(&mut self, fd: Resource<types::Descriptor>) -> FsResult<()> {
        HostDescriptor::sync(&mut self.0, fd).await
    }

    async fn create_directory_at(
        &mut self,
        fd: Resource<types::Descriptor>,
        path: String,
    ) -> FsResult<()> {
        // A directory takes blocks too; the walks count what it really took.
        let meter = self.1.clone();
        if let Some(m) = &meter
            && !m.take(crate::worktree::DIRECTORY_BYTES)
        {
            return Err(FsError::from(super::metered::no_space()));
        }
        let done = HostDescriptor::create_directory_at(&mut self.0, fd, path).await;
        if let (Some(m), Err(_)) = (&meter, &done) {
            m.give(crate::worktree::DIRECTORY_BYTES);
        }
        done
    }

    async fn set_times_at(
        &mut self,
        fd: Resource<types::Descriptor>,
        path_flags: types::PathFlags,
        path: String,
        atim: types::NewTimestamp,
        mtim: types::NewTimestamp,
    ) -> FsResult<()> {
        HostDescriptor::set_times_at(&mut self.0, fd, path_flags, path, atim, mtim).await
    }

    async fn link_at(
        &mut self,
        fd: Resource<types::Descriptor>,
        old_path_flags: types::PathFlags,
        old_path: String,
        new_descriptor: Resource<types::Descriptor>,
        new_path: String,
    ) -> FsResult<()> {
        if let Some(m) = &self.1 {
            m.touch();
        }
        HostDescriptor::link_at(
            &mut self.0,
            fd,
            old_path_flags,
            old_path,
            new_descriptor,
            new_path,
        )
        .await
    }

    async fn open_at(
        &mut self,
        fd: Resource<types::Descriptor>,
        path_flags: types::PathFlags,
        path: String,
        oflags: types::OpenFlags,
        flags: types::DescriptorFlags,
    ) -> FsResult<Resource<types::Descriptor>> {
        if let Some(m) = &self.1
            && (oflags.contains(types::OpenFlags::CREATE)
                || flags.contains(types::DescriptorFlags::WRITE))
        {
            m.touch();
        }
        HostDescriptor::open_at(&mut self.0, fd, path_flags, path, oflags, flags).await
    }

    fn drop(&mut self, fd: Resource<types::Descriptor>) -> wasmtime::Result<()> {
        HostDescriptor::drop(&mut self.0, fd)
    }

    async fn readlink_at(
        &mut self,
        fd: Resource<types::Descriptor>,
        path: String,
    ) -> FsResult<String> {
        HostDescriptor::readlink_at(&mut self.0, fd, path).await
    }

    async fn remove_directory_at(
        &mut self,
        fd: Resource<types::Descriptor>,
        path: String,
    ) -> FsResult<()> {
        HostDescriptor::remove_directory_at(&mut self.0, fd, path).await
    }

    async fn rename_at(
        &mut self,
        fd: Resource<types::Descriptor>,
        old_path: String,
        new_fd: Resource<types::Descriptor>,
        new_path: String,
    ) -> FsResult<()> {
        HostDescriptor::rename_at(&mut self.0, fd, old_path, new_fd, new_path).await
    }

    async fn symlink_at(
        &mut self,
        fd: Resource<types::Descriptor>,
        src_path: String,
        dest_path: String,
    ) -> FsResult<()> {
        if let Some(m) = &self.1 {
            m.touch();
        }
        HostDescriptor::symlink_at(&mut self.0, fd, src_path, dest_path).await
    }

    async fn unlink_file_at(
        &mut self,
        fd: Resource<types::Descriptor>,
        path: String,
    ) -> FsResult<()> {
        HostDescriptor::unlink_file_at(&mut self.0, fd, path).await
    }

    fn read_via_stream(
        &mut self,
        fd: Resource<types::Descriptor>,
        offset: types::Filesize,
    ) -> FsResult<Resource<DynInputStream>> {
        HostDescriptor::read_via_stream(&mut self.0, fd, offset)
    }

    fn write_via_stream(
        &mut self,
        fd: Resource<types::Descriptor>,
        offset: types::Filesize,
    ) -> FsResult<Resource<DynOutputStream>> {
        let metered = self.metered_file(&fd)?;
        let stream = HostDescriptor::write_via_stream(&mut self.0, fd, offset)?;
        self.meter_stream(stream, metered, Some(offset))
    }

    fn append_via_stream(
        &mut self,
        fd: Resource<types::Descriptor>,
    ) -> FsResult<Resource<DynOutputStream>> {
        let metered = self.metered_file(&fd)?;
        let stream = HostDescriptor::append_via_stream(&mut self.0, fd)?;
        self.meter_stream(stream, metered, None)
    }

    async fn is_same_object(
        &mut self,
        a: Resource<types::Descriptor>,
        b: Resource<types::Descriptor>,
    ) -> wasmtime::Result<bool> {
        HostDescriptor::is_same_object(&mut self.0, a, b).await
    }
}

impl HostDirectoryEntryStream for StableFs<'_> {
    async fn read_directory_entry(
        &mut self,
        stream: Resource<types::DirectoryEntryStream>,
    ) -> FsResult<Option<types::DirectoryEntry>> {
        let next = self
            .2
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(&stream.rep())
            .map(|q| q.pop_front());
        match next {
            Some(Some(entry)) => entry.map(Some),
            Some(None) => Ok(None),
            // Not opened through `read_directory` here: as the host has it.
            None => HostDirectoryEntryStream::read_directory_entry(&mut self.0, stream).await,
        }
    }

    fn drop(&mut self, stream: Resource<types::DirectoryEntryStream>) -> wasmtime::Result<()> {
        self.2
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&stream.rep());
        HostDirectoryEntryStream::drop(&mut self.0, stream)
    }
}
