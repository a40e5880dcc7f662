package main

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// vocab generates source-like text from a seeded vocabulary: identifiers
// built from syllables (a Zipf-like choice, plus a per-file working set so
// names repeat locally as in real code), English words for comments and
// per-language statement templates. The mix of repetition and random
// identifiers and numbers compresses about 3-4x with gzip, like source.
type vocab struct {
	idents []string
	types  []string
	words  []string
}

var syllables = strings.Fields(`get set buf node tree chunk pack index read write open close conn req resp
ctx err key val map list item file path name size len count hash sum block page row col cache store repo
snap seal push pull sync lock wait done init load save parse format encode decode stream queue worker pool
task job event log state config opts flag mode time stamp id ref head tail next prev root leaf child parent
scope tenant blob manifest chunker writer reader client server handler route token auth user group quota
limit retry backoff timer clock signal proc exec env arg cmd run stop start pause resume freeze thaw fork
clone copy move link unlink stat attr xattr owner perm mask bit byte word line text rune char str num int
float dec hex bin raw zip flate zstd crypt cipher nonce salt digest verify check prune keep drop`)

var english = strings.Fields(`the a an of to in is it that for on with as by this be are from or at not
when if then else we returns return value values file files each which must may can will should would
caller callers error errors nil zero empty first last next previous new old same other only also before
after until while so but and all any none one two three every into out over under between without within
read write reads writes open closes opens create creates remove removes check checks keeps stores loads
saves parses formats encodes decodes walks lists copies moves links restore restores push pushes pull
snapshot snapshots chunk chunks pack packs index tree trees repository data key keys tenant scope
manifest time size length count offset buffer byte bytes path name directory entry entries number
because since however otherwise therefore note see above below here there above's caller's goroutine
lock held unlock concurrent safe unsafe exported unexported test tests benchmark fast slow large small`)

func newVocab(seed uint64) *vocab {
	r := rng(seed, "vocab", 0)
	v := &vocab{words: english}
	seen := map[string]bool{}
	for len(v.idents) < 3000 {
		n := 1 + r.IntN(3)
		var b strings.Builder
		for k := range n {
			s := syllables[r.IntN(len(syllables))]
			if k > 0 {
				s = strings.ToUpper(s[:1]) + s[1:]
			}
			b.WriteString(s)
		}
		if r.IntN(10) == 0 {
			fmt.Fprintf(&b, "%d", r.IntN(64))
		}
		if id := b.String(); !seen[id] {
			seen[id] = true
			v.idents = append(v.idents, id)
		}
	}
	builtin := []string{"int", "int64", "uint32", "string", "[]byte", "bool", "error", "float64", "context.Context", "time.Duration"}
	v.types = append(v.types, builtin...)
	for len(v.types) < 200 {
		id := v.idents[r.IntN(len(v.idents))]
		v.types = append(v.types, "*"+strings.ToUpper(id[:1])+id[1:])
	}
	return v
}

// zipf picks an index in [0, n) favouring small ones.
func zipf(r *rand.Rand, n int) int {
	u := r.Float64()
	return int(float64(n) * u * u * u)
}

func (v *vocab) ident(r *rand.Rand) string { return v.idents[zipf(r, len(v.idents))] }

func (v *vocab) dirName(r *rand.Rand) string {
	return strings.ToLower(syllables[r.IntN(len(syllables))])
}

func (v *vocab) fileName(r *rand.Rand) string {
	a := syllables[r.IntN(len(syllables))]
	if r.IntN(2) == 0 {
		return a
	}
	return a + "_" + syllables[r.IntN(len(syllables))]
}

// textGen writes one file.
type textGen struct {
	v     *vocab
	r     *rand.Rand
	b     []byte
	local []string // the file's working set of identifiers
}

func (t *textGen) id() string {
	if t.r.IntN(10) < 7 {
		return t.local[t.r.IntN(len(t.local))]
	}
	return t.v.ident(t.r)
}

func (t *textGen) Id() string {
	s := t.id()
	return strings.ToUpper(s[:1]) + s[1:]
}

func (t *textGen) typ() string { return t.v.types[zipf(t.r, len(t.v.types))] }

func (t *textGen) num() string {
	switch t.r.IntN(6) {
	case 0:
		return fmt.Sprintf("0x%08x", t.r.Uint32())
	case 1:
		return fmt.Sprint(t.r.IntN(1 << 20))
	default:
		return fmt.Sprint(t.r.IntN(64))
	}
}

func (t *textGen) sentence(words int) string {
	var b strings.Builder
	for i := range words {
		if i > 0 {
			b.WriteByte(' ')
		}
		if t.r.IntN(6) == 0 {
			b.WriteString(t.id())
		} else {
			b.WriteString(t.v.words[zipf(t.r, len(t.v.words))])
		}
	}
	return b.String()
}

func (t *textGen) line(indent string, format string, args ...any) {
	t.b = append(t.b, indent...)
	t.b = fmt.Appendf(t.b, format, args...)
	t.b = append(t.b, '\n')
}

// source returns size bytes of text in the style of ext (.go, .c, .h, .py
// or .md), ending in a newline.
func (v *vocab) source(r *rand.Rand, ext string, size int) []byte {
	t := &textGen{v: v, r: r, b: make([]byte, 0, size+4*kib)}
	for range 12 + r.IntN(20) {
		t.local = append(t.local, v.ident(r))
	}
	switch ext {
	case ".go":
		t.goFile(size)
	case ".c", ".h":
		t.cFile(size)
	case ".py":
		t.pyFile(size)
	default:
		t.mdFile(size)
	}
	b := t.b[:size]
	if size > 0 {
		b[size-1] = '\n'
	}
	return b
}

func (t *textGen) goFile(size int) {
	pkg := strings.ToLower(t.id())
	t.line("", "// Package %s %s.", pkg, t.sentence(8+t.r.IntN(10)))
	t.line("", "package %s\n", pkg)
	t.line("", "import (")
	for _, imp := range []string{"context", "errors", "fmt", "io", "os", "sync", "time"}[:2+t.r.IntN(5)] {
		t.line("\t", "%q", imp)
	}
	t.line("", ")\n")
	for len(t.b) < size {
		switch t.r.IntN(4) {
		case 0:
			name := t.Id()
			t.line("", "// %s %s.", name, t.sentence(6+t.r.IntN(14)))
			t.line("", "type %s struct {", name)
			for range 2 + t.r.IntN(8) {
				t.line("\t", "%s %s // %s", t.id(), t.typ(), t.sentence(3+t.r.IntN(6)))
			}
			t.line("", "}\n")
		default:
			name := t.Id()
			t.line("", "// %s %s.", name, t.sentence(8+t.r.IntN(16)))
			t.line("", "func (%s *%s) %s(ctx context.Context, %s %s, %s %s) (%s, error) {",
				t.id()[:1], t.Id(), name, t.id(), t.typ(), t.id(), t.typ(), t.typ())
			t.goBody("\t", 3+t.r.IntN(20), 0)
			t.line("", "}\n")
		}
	}
}

func (t *textGen) goBody(indent string, n, depth int) {
	for range n {
		switch k := t.r.IntN(10); {
		case k < 3:
			t.line(indent, "%s, err := %s.%s(ctx, %s)", t.id(), t.id(), t.Id(), t.id())
			t.line(indent, "if err != nil {")
			t.line(indent+"\t", "return nil, fmt.Errorf(\"%s %s %%s: %%w\", %s, err)", t.v.words[zipf(t.r, len(t.v.words))], t.id(), t.id())
			t.line(indent, "}")
		case k < 5:
			t.line(indent, "%s := %s(%s, %s)", t.id(), t.Id(), t.id(), t.num())
		case k < 6 && depth < 3:
			t.line(indent, "for i := 0; i < len(%s); i++ {", t.id())
			t.goBody(indent+"\t", 1+t.r.IntN(4), depth+1)
			t.line(indent, "}")
		case k < 7 && depth < 3:
			t.line(indent, "if %s.%s == %s {", t.id(), t.Id(), t.num())
			t.goBody(indent+"\t", 1+t.r.IntN(3), depth+1)
			t.line(indent, "}")
		case k < 8:
			t.line(indent, "// %s", t.sentence(5+t.r.IntN(12)))
		case k < 9:
			t.line(indent, "%s.%s = append(%s.%s, %s)", t.id(), t.Id(), t.id(), t.Id(), t.id())
		default:
			t.line(indent, "return %s, nil", t.id())
		}
	}
}

func (t *textGen) cFile(size int) {
	t.line("", "/* %s */", t.sentence(10+t.r.IntN(10)))
	for range 2 + t.r.IntN(6) {
		t.line("", "#include <%s.h>", strings.ToLower(t.id()))
	}
	t.line("", "")
	for len(t.b) < size {
		switch t.r.IntN(5) {
		case 0:
			t.line("", "struct %s {", strings.ToLower(t.id()))
			for range 2 + t.r.IntN(8) {
				t.line("\t", "%s %s; /* %s */", []string{"int", "size_t", "uint32_t", "char *", "void *", "uint64_t"}[t.r.IntN(6)], strings.ToLower(t.id()), t.sentence(3+t.r.IntN(5)))
			}
			t.line("", "};\n")
		default:
			t.line("", "/*\n * %s\n */", t.sentence(8+t.r.IntN(16)))
			t.line("", "static int %s(struct %s *%s, size_t %s)\n{", strings.ToLower(t.id()), strings.ToLower(t.id()), strings.ToLower(t.id()[:1]), t.id())
			for range 3 + t.r.IntN(16) {
				switch t.r.IntN(6) {
				case 0:
					t.line("\t", "if (%s->%s == NULL)\n\t\treturn -EINVAL;", t.id(), t.id())
				case 1:
					t.line("\t", "%s[%s] = %s(%s, %s);", t.id(), t.id(), t.id(), t.id(), t.num())
				case 2:
					t.line("\t", "/* %s */", t.sentence(4+t.r.IntN(10)))
				case 3:
					t.line("\t", "for (i = 0; i < %s; i++)\n\t\t%s += %s[i];", t.num(), t.id(), t.id())
				default:
					t.line("\t", "%s = %s->%s + %s;", t.id(), t.id(), t.id(), t.num())
				}
			}
			t.line("\t", "return 0;\n}\n")
		}
	}
}

func (t *textGen) pyFile(size int) {
	t.line("", "\"\"\"%s.\"\"\"\n", t.sentence(8+t.r.IntN(10)))
	for range 1 + t.r.IntN(5) {
		t.line("", "import %s", strings.ToLower(t.id()))
	}
	t.line("", "")
	for len(t.b) < size {
		t.line("", "\nclass %s:", t.Id())
		t.line("    ", "\"\"\"%s.\"\"\"\n", t.sentence(6+t.r.IntN(12)))
		for range 1 + t.r.IntN(5) {
			t.line("    ", "def %s(self, %s, %s=None):", strings.ToLower(t.id()), strings.ToLower(t.id()), strings.ToLower(t.id()))
			for range 2 + t.r.IntN(10) {
				switch t.r.IntN(5) {
				case 0:
					t.line("        ", "if %s is None:\n            raise ValueError(\"%s\")", strings.ToLower(t.id()), t.sentence(4+t.r.IntN(6)))
				case 1:
					t.line("        ", "# %s", t.sentence(4+t.r.IntN(10)))
				case 2:
					t.line("        ", "self.%s = %s(%s, %s)", strings.ToLower(t.id()), t.id(), strings.ToLower(t.id()), t.num())
				default:
					t.line("        ", "%s = self.%s.%s(%s)", strings.ToLower(t.id()), strings.ToLower(t.id()), strings.ToLower(t.id()), t.num())
				}
			}
			t.line("        ", "return %s\n", strings.ToLower(t.id()))
		}
	}
}

func (t *textGen) mdFile(size int) {
	t.line("", "# %s\n", t.sentence(3+t.r.IntN(4)))
	for len(t.b) < size {
		switch t.r.IntN(5) {
		case 0:
			t.line("", "## %s\n", t.sentence(2+t.r.IntN(5)))
		case 1:
			for range 2 + t.r.IntN(5) {
				t.line("", "- %s", t.sentence(4+t.r.IntN(10)))
			}
			t.line("", "")
		case 2:
			t.line("", "```sh\n%s %s --%s=%s\n```\n", strings.ToLower(t.id()), strings.ToLower(t.id()), strings.ToLower(t.id()), t.num())
		default:
			for range 2 + t.r.IntN(5) {
				t.line("", "%s.", t.sentence(8+t.r.IntN(16)))
			}
			t.line("", "")
		}
	}
}
