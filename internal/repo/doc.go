// Package repo is stead's off-box repository: content-defined chunks named
// by keyed BLAKE3 ids, compressed with zstd, sealed with AES-256-GCM under a
// data key per scope, packed into pack files, located by index files and
// tied together by snapshot manifests. restic's design is the model.
//
// # Layout on the blob store
//
//	config                              plaintext JSON: version, repository id, chunker parameters, a master-key check
//	scopes/<scope>/key                  the scope's data key, wrapped by the master key (seal.Wrap)
//	scopes/<scope>/data/<xx>/<pack id>  pack files: sealed blobs, then a sealed header
//	scopes/<scope>/index/<file id>      sealed index files: which blobs each pack holds
//	scopes/<scope>/snapshots/<id>       sealed snapshot manifests
//	scopes/<scope>/records/damage/<id>  sealed damage marks: a pack check found damaged
//
// A scope is a dedup and key domain: "t-<tenant>" holds a tenant's
// sandboxes, "v-<volume>" one volume. Nothing is shared between scopes, so
// no data is deduplicated across tenants, and deleting a scope's key object
// makes everything under the scope unreadable (cryptographic erasure); prune
// then deletes the scope's objects. Object names are content hashes (packs,
// index files, manifests: seal.Hash of the stored bytes), so a cached or
// fetched object is verified by its name; blobs are named by the keyed id of
// their plaintext and verified by it after decryption.
//
// # Crash ordering
//
// A push writes packs first, then one index file listing exactly the packs it
// wrote, then the manifest; each write is atomic and durable before the next
// begins (BlobStore.Put; on a store that spools, the local one, a pack is
// written to a temp file as its blobs are encoded and committed with the
// same guarantee: fsync, rename, fsync of the directory). So a manifest never names a tree or chunk whose
// pack and index entry are not already durable, and a push killed at any
// point leaves at worst packs no index lists (check reports them, prune
// deletes them) or an index without a manifest (its blobs are unused until a
// later push reuses them or prune drops them).
//
// Prune writes repacked packs first, then a new index file that lists every
// live pack and supersedes the index files it replaces, then deletes the old
// index files, and only then deletes packs that no live index lists. A prune
// killed at any point leaves every manifest's blobs reachable through a
// live index. Forget deletes manifest objects only.
//
// # Damaged packs
//
// Check marks every pack it finds missing or damaged with a sealed record
// (records/damage/<pack id>, authenticated by the scope's key) before it
// reports it, and clears the mark of a marked pack it reads back intact.
// Every Repository that opens the scope reads the marks with the index, so
// a daemon on another machine honours them: a blob whose only indexed copy
// is in a marked pack counts as absent for a push, which uploads it again
// from its source (an unchanged file whose chunks a marked pack holds is
// read again; a parent tree that cannot be read is no parent); when a blob
// is indexed twice, lookups resolve it to the copy outside marked packs.
// Prune never repacks a marked pack (it deletes it once no blob in it is
// used, then its mark).
//
// Repair writes new packs first: the intact blobs of the marked packs that
// have no intact copy elsewhere, then what damaged snapshots lack, read
// again from local copies; each batch of packs is followed by one index
// file listing exactly those packs, as a push writes them. Only then does
// it write an index file that lists every pack of the index files naming a
// marked pack except the marked packs, superseding those files; then it
// deletes the superseded index files, then the marked packs, and last their
// marks. So a new pack is durable and indexed before an old one is dropped,
// and a repair killed at any point leaves every blob that was readable
// before it readable through a live index; what it can leave is an
// unindexed pack (prune deletes it) or a mark of a pack no index lists
// (check warns, repair and prune clear it). Repair writes no manifest:
// a damaged snapshot is repaired when every blob it names is readable again.
//
// Within one process, push, prune, repair and forget take the scope's lock
// in the Repository; check writes only damage marks. Across processes (the
// nodes of a cluster) Options.Guard orders them the same way: pushes share
// a scope, prune, repair and forget hold it alone, and stop before their
// next deletion (and before prune's or repair's index rewrite) once that
// hold ends on its own (the node's lease on the scope lapsed or was taken
// over); where they stop, the crash ordering above holds. Without a guard,
// running two daemons against one repository for the same tenant is not
// supported.
//
// # Writers
//
// A manifest records its writer: the node that pushed it and the epoch of
// the lease it pushed under (Manifest.Writer; zero in older manifests).
// Within one source the newest manifest is the one with the highest epoch,
// then the newest time (CompareManifests): a node that lost a sandbox's
// lease and still pushes writes at its old epoch, so its manifest never
// counts as newer than the new owner's, whatever its time.
package repo
