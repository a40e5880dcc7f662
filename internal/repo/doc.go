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
// begins (BlobStore.Put). So a manifest never names a tree or chunk whose
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
// One process writes a scope at a time: push, prune and forget take the
// scope's lock in the Repository (in-process). Running two daemons against
// one repository for the same tenant is not supported.
package repo
