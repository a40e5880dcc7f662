package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dustin/go-humanize"
	"golang.org/x/term"

	"github.com/stead-dev/stead/client"
)

// plainProgressEvery is how often a progress line is written when stderr
// is not a terminal (a log file, CI): one line every so often and one at
// the end, never a redraw.
const plainProgressEvery = 2 * time.Second

// barWidth is the number of cells of the drawn bar.
const barWidth = 20

// progressBar draws the progress of an operation on stderr. On a terminal
// it redraws one line in place (\r); elsewhere it writes a plain line
// every plainProgressEvery and a last one when the operation ends. It is
// used from one goroutine.
type progressBar struct {
	w     io.Writer
	label string
	tty   bool
	width int // terminal columns
	now   func() time.Time

	lastPlain time.Time // when the last plain line was written
	drawn     int       // columns of the line on screen (tty)
	finished  bool
}

// newProgressBar returns a bar for the operation called label, drawn on
// w; it redraws in place when w is a terminal.
func newProgressBar(w io.Writer, label string) *progressBar {
	p := &progressBar{w: w, label: label, width: 80, now: time.Now}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		p.tty = true
		if cols, _, err := term.GetSize(int(f.Fd())); err == nil && cols > 20 {
			p.width = cols
		}
	}
	p.lastPlain = p.now()
	return p
}

// Update shows a new state of the operation.
func (p *progressBar) Update(op client.Operation) {
	if p.finished || op.Done() {
		return
	}
	if p.tty {
		p.redraw(progressLine(p.label, op, true))
		return
	}
	if now := p.now(); now.Sub(p.lastPlain) >= plainProgressEvery {
		p.lastPlain = now
		fmt.Fprintln(p.w, progressLine(p.label, op, false))
	}
}

// Finish shows the final state of the operation and ends the line.
func (p *progressBar) Finish(op client.Operation) {
	if p.finished {
		return
	}
	p.finished = true
	if p.tty {
		p.redraw(progressLine(p.label, op, true))
		fmt.Fprintln(p.w)
		return
	}
	fmt.Fprintln(p.w, progressLine(p.label, op, false))
}

// Abort ends a drawn line without a final state (the watch broke).
func (p *progressBar) Abort() {
	if p.finished {
		return
	}
	p.finished = true
	if p.tty && p.drawn > 0 {
		fmt.Fprintln(p.w)
	}
}

// redraw replaces the line on screen with line, cut to the terminal width.
func (p *progressBar) redraw(line string) {
	if n := utf8.RuneCountInString(line); n >= p.width {
		line = string([]rune(line)[:p.width-1])
	}
	n := utf8.RuneCountInString(line)
	pad := ""
	if p.drawn > n {
		pad = strings.Repeat(" ", p.drawn-n)
	}
	fmt.Fprint(p.w, "\r"+line+pad)
	p.drawn = n
}

// progressLine renders the state of op: its label and phase (or final
// state), the bar (when bar is set), the percentage of bytes (of files
// when the bytes are unknown), bytes done of total, the average rate in
// MB/s, files done of total, and the ETA while it runs or the elapsed
// time once it has ended.
func progressLine(label string, op client.Operation, bar bool) string {
	var pr client.Progress
	if op.Progress != nil {
		pr = *op.Progress
	}
	parts := []string{label + ":"}
	status := pr.Phase
	if op.Done() || status == "" {
		status = op.State
	}
	if status != "" {
		parts = append(parts, status)
	}

	frac := -1.0
	switch {
	case pr.BytesTotal > 0:
		frac = float64(pr.BytesDone) / float64(pr.BytesTotal)
	case pr.FilesTotal > 0:
		frac = float64(pr.FilesDone) / float64(pr.FilesTotal)
	case op.State == client.OperationSucceeded:
		frac = 1
	}
	frac = min(frac, 1)
	if bar {
		parts = append(parts, drawBar(frac))
	}
	if frac >= 0 {
		parts = append(parts, fmt.Sprintf("%3.0f%%", frac*100))
	}

	var stats []string
	if pr.BytesTotal > 0 {
		stats = append(stats, humanize.IBytes(uint64(max(pr.BytesDone, 0)))+" / "+humanize.IBytes(uint64(pr.BytesTotal)))
	} else if pr.BytesDone > 0 {
		stats = append(stats, humanize.IBytes(uint64(pr.BytesDone)))
	}
	rate := 0.0
	if pr.Elapsed > 0 && pr.BytesDone > 0 {
		rate = float64(pr.BytesDone) / pr.Elapsed
		stats = append(stats, fmt.Sprintf("%.1f MB/s", rate/1e6))
	}
	if pr.FilesTotal > 0 {
		stats = append(stats, fmt.Sprintf("files %d/%d", pr.FilesDone, pr.FilesTotal))
	} else if pr.FilesDone > 0 {
		stats = append(stats, fmt.Sprintf("files %d", pr.FilesDone))
	}
	if pr.BytesMoved > 0 {
		stats = append(stats, "moved "+humanize.IBytes(uint64(pr.BytesMoved)))
	}
	switch {
	case op.Done():
		if d := opDuration(op, pr); d > 0 {
			stats = append(stats, "in "+roundDuration(d).String())
		}
	case rate > 0 && pr.BytesTotal > pr.BytesDone:
		eta := time.Duration(float64(pr.BytesTotal-pr.BytesDone) / rate * float64(time.Second))
		stats = append(stats, "ETA "+roundDuration(eta).String())
	}
	line := strings.Join(parts, " ")
	if len(stats) > 0 {
		sep := ", "
		if bar {
			sep = "  "
		}
		line += "  " + strings.Join(stats, sep)
	}
	return line
}

// drawBar draws frac (0 to 1; negative when unknown) as [#####-----].
func drawBar(frac float64) string {
	if frac < 0 {
		return "[" + strings.Repeat("?", barWidth) + "]"
	}
	n := int(frac * barWidth)
	return "[" + strings.Repeat("#", n) + strings.Repeat("-", barWidth-n) + "]"
}

// opDuration is how long an ended operation took.
func opDuration(op client.Operation, pr client.Progress) time.Duration {
	if op.EndedAt != nil && !op.StartedAt.IsZero() {
		return op.EndedAt.Sub(op.StartedAt)
	}
	return time.Duration(pr.Elapsed * float64(time.Second))
}

// roundDuration rounds d for people: whole seconds, tenths below 10 s.
func roundDuration(d time.Duration) time.Duration {
	if d < 10*time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}
