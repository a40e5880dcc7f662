// Command netsrv is the e2e tests' program inside a sandbox: a web server
// (plain pages, headers echoed, a streamed response, a WebSocket echo) and
// a bulk sender for throughput measurements. It is built statically and
// copied into sandboxes by the tests.
//
//	netsrv serve PORT
//	netsrv send HOST:PORT BYTES   (prints the seconds it took)
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/coder/websocket"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: netsrv serve PORT | netsrv send HOST:PORT BYTES")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2])
	case "send":
		if len(os.Args) < 4 {
			err = fmt.Errorf("send: want HOST:PORT BYTES")
			break
		}
		err = send(os.Args[2], os.Args[3])
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "netsrv:", err)
		os.Exit(1)
	}
}

func serve(port string) error {
	host, _ := os.Hostname()
	mux := http.NewServeMux()
	mux.HandleFunc("/headers", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"headers": r.Header, "path": r.URL.Path, "query": r.URL.RawQuery, "host": r.Host})
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			fmt.Fprintf(w, "data: tick %d\n\n", i)
			w.(http.Flusher).Flush()
			time.Sleep(300 * time.Millisecond)
		}
	})
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, b, err := c.Read(r.Context())
			if err != nil {
				return
			}
			if err := c.Write(r.Context(), typ, append([]byte("echo: "), b...)); err != nil {
				return
			}
		}
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s path=%s\n", host, r.URL.Path)
	})
	srv := &http.Server{Addr: ":" + port, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	return srv.ListenAndServe()
}

func send(addr, size string) error {
	n, err := strconv.ParseInt(size, 10, 64)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	t0 := time.Now()
	buf := make([]byte, 64<<10)
	if _, err := io.CopyBuffer(c, io.LimitReader(zeros{}, n), buf); err != nil {
		return err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	io.Copy(io.Discard, c) // the sink closes when it has read everything
	fmt.Printf("%.3f\n", time.Since(t0).Seconds())
	return nil
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
