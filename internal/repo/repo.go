package repo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stead-dev/stead/internal/blobstore"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/fsutil"
	"github.com/stead-dev/stead/internal/pool"
	"github.com/stead-dev/stead/internal/repo/chunker"
	"github.com/stead-dev/stead/internal/repo/pack"
	"github.com/stead-dev/stead/internal/repo/seal"
)

// Version is the repository format version written by Init.
const Version = 1

// ErrNoRepository means the blob store holds no repository config.
var ErrNoRepository = errors.New("no repository")

// ErrWrongKey means the master key does not open this repository.
var ErrWrongKey = errors.New("wrong master key")

// ErrScopeErased means the scope's data key is gone: its data is unreadable.
var ErrScopeErased = errors.New("scope erased")

// Config is the repository's plaintext config object.
type Config struct {
	Version int            `json:"version"`
	ID      string         `json:"id"`
	Created time.Time      `json:"created"`
	Chunker chunker.Params `json:"chunker"`
	// Check is a random key wrapped by the master key: Open unwraps it to
	// tell a wrong master key from a corrupt repository.
	Check []byte `json:"check"`
}

// InitOptions tunes Init.
type InitOptions struct {
	// Chunker overrides the chunking parameters (zero: chunker.DefaultParams).
	Chunker chunker.Params
}

// Init writes a new repository's config to store, bound to master.
// errs.ErrConflict if the store already holds a repository.
func Init(ctx context.Context, store blobstore.BlobStore, master seal.Key, opts ...InitOptions) error {
	if _, err := store.Stat(ctx, "config"); err == nil {
		return fmt.Errorf("init repository at %s: already initialised: %w", store.Location(), errs.ErrConflict)
	} else if !errors.Is(err, errs.ErrNotFound) {
		return fmt.Errorf("init repository at %s: %w", store.Location(), err)
	}
	params := chunker.DefaultParams()
	if len(opts) > 0 && opts[0].Chunker != (chunker.Params{}) {
		params = opts[0].Chunker
	}
	if err := params.Validate(); err != nil {
		return fmt.Errorf("init repository: %w", err)
	}
	idKey, err := seal.NewKey()
	if err != nil {
		return err
	}
	id := seal.Hash(idKey[:]).String()[:16]
	check, err := seal.Wrap(master, "check "+id, idKey)
	if err != nil {
		return err
	}
	cfg := Config{Version: Version, ID: id, Created: time.Now().UTC(), Chunker: params, Check: check}
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	if err := store.Put(ctx, "config", data); err != nil {
		return fmt.Errorf("init repository at %s: %w", store.Location(), err)
	}
	return nil
}

// Options tunes Open.
type Options struct {
	// CacheDir keeps verified copies of index files, manifests and tree
	// blobs so incremental pushes need not fetch them ("" = no cache).
	CacheDir string
	// Workers is the number of parallel compress/encrypt workers (0 = GOMAXPROCS).
	Workers int
	// Transfers is the number of parallel uploads/downloads (0 = 4).
	Transfers int
	// Readers is the number of files a push reads at once (0 = Workers +
	// 1, at least 3): more than the cores, so reads from a cold page cache
	// overlap.
	Readers int
	// PackSize is the target pack size in bytes (0 = 16 MiB).
	PackSize int
	// Logger receives progress and warnings (nil = slog.Default()).
	Logger *slog.Logger
	// Guard orders the scope's writers across processes (the nodes of a
	// cluster) as the scope's own lock orders them within one: nil, one
	// process writes the repository.
	Guard ScopeGuard
}

// ScopeGuard orders, across the processes that write one repository, what
// a scope's lock orders within one: pushes share a scope (they only add
// content-addressed objects), while prune and repair, which delete and
// rewrite packs a push elsewhere may be writing or deduplicating against,
// need it alone. Each method returns once the scope is held that way, or
// with ctx's error; release ends the hold. Exclusive also returns held, a
// context derived from ctx that ends when the hold ends on its own (the
// node's lease on the scope lapsed or was taken over), with
// context.Cause saying why: prune, repair and forget check it before each
// deletion and stop, so a node that lost the scope deletes nothing more.
type ScopeGuard interface {
	Shared(ctx context.Context, scope string) (release func(), err error)
	Exclusive(ctx context.Context, scope string) (held context.Context, release func(), err error)
}

// hold takes the repository's guard on scope s (a no-op without one) and
// returns the context to work under: ctx, or for an exclusive hold the
// guard's held context.
func (s *Scope) hold(ctx context.Context, exclusive bool) (context.Context, func(), error) {
	g := s.r.opts.Guard
	if g == nil {
		return ctx, func() {}, nil
	}
	if exclusive {
		return g.Exclusive(ctx, s.name)
	}
	release, err := g.Shared(ctx, s.name)
	return ctx, release, err
}

// whyStopped adds to err, the failure of an operation under an exclusive
// hold, why the hold ended when it has (a store call cut short by it fails
// with the bare context error).
func whyStopped(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil {
		return err
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
		return fmt.Errorf("%w: %w", err, cause)
	}
	return err
}

// stillHeld returns nil while ctx (an exclusive hold's) lasts, else an
// error saying that the operation stopped before what, and why (the lost
// lease, by context.Cause).
func stillHeld(ctx context.Context, what string) error {
	if ctx.Err() == nil {
		return nil
	}
	return fmt.Errorf("stopped before %s: %w", what, context.Cause(ctx))
}

// Repository is an opened repository. Safe for concurrent use.
type Repository struct {
	store  blobstore.BlobStore
	master seal.Key
	cfg    Config
	opts   Options
	log    *slog.Logger

	mu     sync.Mutex
	scopes map[string]*Scope
}

// Open reads the config of the repository on store and checks master
// against it. ErrNoRepository if there is none, ErrWrongKey if master does
// not open it.
func Open(ctx context.Context, store blobstore.BlobStore, master seal.Key, opts Options) (*Repository, error) {
	data, err := store.Get(ctx, "config")
	if errors.Is(err, errs.ErrNotFound) {
		return nil, fmt.Errorf("open repository at %s: %w (run `stead repo init`)", store.Location(), ErrNoRepository)
	}
	if err != nil {
		return nil, fmt.Errorf("open repository at %s: %w", store.Location(), err)
	}
	var cfg Config
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("open repository at %s: config: %w: %w", store.Location(), errs.ErrInvalid, err)
	}
	if cfg.Version != Version {
		return nil, fmt.Errorf("open repository at %s: format version %d, this stead reads %d: %w", store.Location(), cfg.Version, Version, errs.ErrUnsupported)
	}
	if err := cfg.Chunker.Validate(); err != nil {
		return nil, fmt.Errorf("open repository at %s: config: %w", store.Location(), err)
	}
	if !pool.ValidID(cfg.ID) {
		return nil, fmt.Errorf("open repository at %s: config id %q: %w", store.Location(), cfg.ID, errs.ErrInvalid)
	}
	if _, err := seal.Unwrap(master, "check "+cfg.ID, cfg.Check); err != nil {
		return nil, fmt.Errorf("open repository at %s: %w", store.Location(), ErrWrongKey)
	}
	if opts.Workers <= 0 {
		opts.Workers = runtime.GOMAXPROCS(0)
	}
	if opts.Transfers <= 0 {
		opts.Transfers = 4
	}
	if opts.Readers <= 0 {
		opts.Readers = max(2, opts.Workers) + 1
	}
	if opts.PackSize <= 0 {
		opts.PackSize = 16 << 20
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Repository{store: store, master: master, cfg: cfg, opts: opts, log: opts.Logger, scopes: map[string]*Scope{}}, nil
}

// Config returns the repository's config.
func (r *Repository) Config() Config { return r.cfg }

// Store returns the blob store underneath.
func (r *Repository) Store() blobstore.BlobStore { return r.store }

func scopePrefix(scope string) string { return "scopes/" + scope + "/" }
func keyKey(scope string) string      { return scopePrefix(scope) + "key" }
func packKey(scope string, id seal.ID) string {
	s := id.String()
	return scopePrefix(scope) + "data/" + s[:2] + "/" + s
}
func indexKey(scope string, id seal.ID) string { return scopePrefix(scope) + "index/" + id.String() }
func manifestKey(scope string, id seal.ID) string {
	return scopePrefix(scope) + "snapshots/" + id.String()
}

// Scopes lists the scopes whose data key exists (erased scopes are left out).
func (r *Repository) Scopes(ctx context.Context) ([]string, error) {
	infos, err := r.store.List(ctx, "scopes/")
	if err != nil {
		return nil, fmt.Errorf("list scopes: %w", err)
	}
	var out []string
	for _, in := range infos {
		rest := strings.TrimPrefix(in.Key, "scopes/")
		name, tail, ok := strings.Cut(rest, "/")
		if ok && tail == "key" && pool.ValidID(name) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Scope opens the scope name, creating its data key when create is true.
// errs.ErrNotFound if it does not exist and create is false;
// ErrScopeErased is not distinguished from absence (the key is gone either
// way).
func (r *Repository) Scope(ctx context.Context, name string, create bool) (*Scope, error) {
	if !pool.ValidID(name) {
		return nil, fmt.Errorf("open scope %q: %w", name, errs.ErrInvalid)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.scopes[name]; ok {
		return s, nil
	}
	wrapped, err := r.store.Get(ctx, keyKey(name))
	var key seal.Key
	switch {
	case errors.Is(err, errs.ErrNotFound):
		if !create {
			return nil, fmt.Errorf("open scope %s: %w", name, errs.ErrNotFound)
		}
		if key, err = seal.NewKey(); err != nil {
			return nil, err
		}
		if wrapped, err = seal.Wrap(r.master, name, key); err != nil {
			return nil, err
		}
		if err := r.store.Put(ctx, keyKey(name), wrapped); err != nil {
			return nil, fmt.Errorf("create scope %s: %w", name, err)
		}
	case err != nil:
		return nil, fmt.Errorf("open scope %s: %w", name, err)
	default:
		if key, err = seal.Unwrap(r.master, name, wrapped); err != nil {
			return nil, fmt.Errorf("open scope %s: data key: %w", name, err)
		}
	}
	s, err := newScope(r, name, key)
	if err != nil {
		return nil, err
	}
	r.scopes[name] = s
	return s, nil
}

// Erase destroys the scope's data key, making every object under the scope
// unreadable, then deletes the scope's objects and its cache. If deleting
// the objects fails part way, the key is already gone; Prune finishes the
// job.
func (r *Repository) Erase(ctx context.Context, name string) error {
	if !pool.ValidID(name) {
		return fmt.Errorf("erase scope %q: %w", name, errs.ErrInvalid)
	}
	r.mu.Lock()
	if s, ok := r.scopes[name]; ok {
		s.lock.Lock()
		defer s.lock.Unlock()
		delete(r.scopes, name)
	}
	r.mu.Unlock()
	if err := r.store.Delete(ctx, keyKey(name)); err != nil {
		return fmt.Errorf("erase scope %s: delete key: %w", name, err)
	}
	if r.opts.CacheDir != "" {
		if err := os.RemoveAll(r.cacheDir(name)); err != nil {
			return fmt.Errorf("erase scope %s: cache: %w", name, err)
		}
	}
	return r.deleteScopeObjects(ctx, name)
}

// deleteScopeObjects deletes everything under a scope whose key is gone.
func (r *Repository) deleteScopeObjects(ctx context.Context, name string) error {
	infos, err := r.store.List(ctx, scopePrefix(name))
	if err != nil {
		return fmt.Errorf("erase scope %s: list: %w", name, err)
	}
	for _, in := range infos {
		if err := r.store.Delete(ctx, in.Key); err != nil {
			return fmt.Errorf("erase scope %s: delete %s: %w", name, in.Key, err)
		}
	}
	return nil
}

// PruneErased deletes the objects of every scope whose key is gone (an
// erasure interrupted part way) and returns how many objects it deleted.
func (r *Repository) PruneErased(ctx context.Context) (int, error) {
	infos, err := r.store.List(ctx, "scopes/")
	if err != nil {
		return 0, fmt.Errorf("prune erased scopes: %w", err)
	}
	hasKey := map[string]bool{}
	objs := map[string][]string{}
	for _, in := range infos {
		name, tail, _ := strings.Cut(strings.TrimPrefix(in.Key, "scopes/"), "/")
		if tail == "key" {
			hasKey[name] = true
		}
		objs[name] = append(objs[name], in.Key)
	}
	n := 0
	for name, keys := range objs {
		if hasKey[name] {
			continue
		}
		for _, k := range keys {
			if err := r.store.Delete(ctx, k); err != nil {
				return n, fmt.Errorf("prune erased scope %s: %w", name, err)
			}
			n++
		}
	}
	return n, nil
}

func (r *Repository) cacheDir(scope string) string {
	return filepath.Join(r.opts.CacheDir, r.cfg.ID, scope)
}

// blobLoc locates a blob: the pack holding it and its place there.
type blobLoc struct {
	pack seal.ID
	blob pack.Blob
}

// Scope is one key and dedup domain of a repository. Safe for concurrent use.
type Scope struct {
	r     *Repository
	name  string
	codec *pack.Codec
	seed  [32]byte

	// lock: push holds it shared, prune/forget/erase exclusively.
	lock sync.RWMutex

	mu        sync.Mutex
	blobs     map[seal.ID]blobLoc
	packs     map[seal.ID]int64 // pack id → size
	indexes   map[seal.ID]pack.IndexFile
	loadedIdx bool
	// badIndexes lists index files skipped as damaged by the last load
	// (and damage marks that failed to authenticate).
	badIndexes []string
	// damaged holds the damage marks of packs (see damage.go).
	damaged map[seal.ID]*PackDamage
	// maxEntries overrides the restore entry bound (tests).
	maxEntries int64
	// restoreBatch overrides the files per restore batch (tests).
	restoreBatch int
}

func newScope(r *Repository, name string, key seal.Key) (*Scope, error) {
	s, err := seal.NewSealer(key)
	if err != nil {
		return nil, err
	}
	c, err := pack.NewCodec(s)
	if err != nil {
		return nil, err
	}
	return &Scope{r: r, name: name, codec: c, seed: s.ChunkerSeed(),
		blobs: map[seal.ID]blobLoc{}, packs: map[seal.ID]int64{}, indexes: map[seal.ID]pack.IndexFile{},
		damaged: map[seal.ID]*PackDamage{}}, nil
}

// Name returns the scope's name.
func (s *Scope) Name() string { return s.name }

// cached returns the bytes of a content-addressed object (named by
// seal.Hash of its bytes), from the local cache when present and intact,
// else from the store (then cached).
func (s *Scope) cached(ctx context.Context, kind, key string, id seal.ID) ([]byte, error) {
	var path string
	if s.r.opts.CacheDir != "" {
		path = filepath.Join(s.r.cacheDir(s.name), kind, id.String())
		if data, err := os.ReadFile(path); err == nil && seal.Hash(data) == id {
			return data, nil
		}
	}
	data, err := s.r.store.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	if seal.Hash(data) != id {
		return nil, fmt.Errorf("read %s: content does not match its name: %w", key, pack.ErrCorrupt)
	}
	if path != "" {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err == nil {
			if err := fsutil.WriteFileAtomic(path, data, 0o600); err != nil {
				s.r.log.Warn("repository cache write failed", "path", path, "err", err)
			}
		}
	}
	return data, nil
}

// loadIndex reads every live index file not yet loaded.
func (s *Scope) loadIndex(ctx context.Context) error {
	infos, err := s.r.store.List(ctx, scopePrefix(s.name)+"index/")
	if err != nil {
		return fmt.Errorf("list index files of %s: %w", s.name, err)
	}
	files := map[seal.ID]pack.IndexFile{}
	var fresh []seal.ID // loaded now, not by an earlier load
	var bad []string
	for _, in := range infos {
		id, err := seal.ParseID(in.Key[strings.LastIndexByte(in.Key, '/')+1:])
		if err != nil {
			continue // not ours (a temp file of some tool): ignore
		}
		s.mu.Lock()
		f, ok := s.indexes[id]
		s.mu.Unlock()
		if !ok {
			data, err := s.cached(ctx, "index", in.Key, id)
			if errors.Is(err, errs.ErrNotFound) {
				continue // deleted by a prune since the listing
			}
			if err == nil {
				f, err = pack.DecodeIndex(s.codec, data)
			}
			if errors.Is(err, pack.ErrCorrupt) || errors.Is(err, seal.ErrAuth) {
				// A damaged index file must not make the whole scope
				// unreadable: skip it (what only it lists is then missing,
				// which check reports) and refuse to prune until fixed.
				s.r.log.Warn("skipping a damaged index file", "scope", s.name, "index", id.String(), "err", err)
				bad = append(bad, fmt.Sprintf("index %s: %v", id, err))
				continue
			}
			if err != nil {
				return fmt.Errorf("load index %s: %w", id, err)
			}
			fresh = append(fresh, id)
		}
		files[id] = f
	}
	damaged, badMarks, err := s.loadDamage(ctx)
	if err != nil {
		return err
	}
	bad = append(bad, badMarks...)
	if s.addFresh(files, fresh, damaged, bad) {
		return nil
	}
	superseded := map[seal.ID]bool{}
	for _, f := range files {
		for _, old := range f.Supersedes {
			superseded[old] = true
		}
	}
	blobs := map[seal.ID]blobLoc{}
	packs := map[seal.ID]int64{}
	for id, f := range files {
		if superseded[id] {
			continue
		}
		for _, p := range f.Packs {
			packs[p.ID] = p.Size
			for _, b := range p.Blobs {
				// A blob stored twice resolves to a pack not marked damaged.
				if old, ok := blobs[b.ID]; ok && damaged[old.pack] == nil {
					continue
				}
				blobs[b.ID] = blobLoc{pack: p.ID, blob: b}
			}
		}
	}
	s.mu.Lock()
	s.indexes = files
	s.blobs = blobs
	s.packs = packs
	s.badIndexes = bad
	s.damaged = damaged
	s.loadedIdx = true
	s.mu.Unlock()
	return nil
}

// addFresh makes a reload that only found new index files cost what they
// hold, not what the scope holds (a push of a large tree with little
// changed reloads the index of millions of blobs): when every index file
// of the last load is still listed, no new file supersedes or is
// superseded by another, and the damage marks name the same packs, the
// new files' blobs are added to the loaded maps as a full load would
// resolve them (addIndex's rule) and it returns true. Otherwise it changes
// nothing and returns false: the caller rebuilds the maps.
func (s *Scope) addFresh(files map[seal.ID]pack.IndexFile, fresh []seal.ID, damaged map[seal.ID]*PackDamage, bad []string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.loadedIdx || len(damaged) != len(s.damaged) {
		return false
	}
	for id := range damaged {
		if _, ok := s.damaged[id]; !ok {
			return false
		}
	}
	superseded := map[seal.ID]bool{}
	for id, f := range s.indexes {
		if _, ok := files[id]; !ok {
			return false // removed (a prune or repair): rebuild
		}
		for _, old := range f.Supersedes {
			superseded[old] = true
		}
	}
	for _, id := range fresh {
		if superseded[id] || len(files[id].Supersedes) > 0 {
			return false
		}
	}
	for _, id := range fresh {
		s.indexes[id] = files[id]
		for _, pk := range files[id].Packs {
			s.packs[pk.ID] = pk.Size
			for _, b := range pk.Blobs {
				if old, ok := s.blobs[b.ID]; ok && s.damaged[old.pack] == nil {
					continue // an intact copy stays the one read
				}
				s.blobs[b.ID] = blobLoc{pack: pk.ID, blob: b}
			}
		}
	}
	s.badIndexes = bad
	s.damaged = damaged
	return true
}

// ensureIndex loads the index once; lookups of many paths (file history)
// then do not list the index files again. Push, restore, check and prune
// reload it (another writer may have added files).
func (s *Scope) ensureIndex(ctx context.Context) error {
	s.mu.Lock()
	loaded := s.loadedIdx
	s.mu.Unlock()
	if loaded {
		return nil
	}
	return s.loadIndex(ctx)
}

// lookup returns where a blob is stored.
func (s *Scope) lookup(id seal.ID) (blobLoc, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.blobs[id]
	return l, ok
}

// loadBlob fetches, authenticates and decodes one blob.
func (s *Scope) loadBlob(ctx context.Context, t pack.BlobType, id seal.ID, dst []byte) ([]byte, error) {
	loc, ok := s.lookup(id)
	if !ok {
		return nil, fmt.Errorf("load blob %s: not in the index: %w", id, pack.ErrCorrupt)
	}
	if loc.blob.Type != t {
		return nil, fmt.Errorf("load blob %s: wrong type: %w", id, pack.ErrCorrupt)
	}
	stored, err := s.r.store.GetRange(ctx, packKey(s.name, loc.pack), int64(loc.blob.Offset), int64(loc.blob.Length))
	if err != nil {
		return nil, fmt.Errorf("load blob %s from pack %s: %w", id, loc.pack, err)
	}
	out, err := s.codec.Decode(dst, loc.blob, stored)
	if err != nil {
		return nil, fmt.Errorf("load blob %s from pack %s: %w", id, loc.pack, err)
	}
	return out, nil
}
