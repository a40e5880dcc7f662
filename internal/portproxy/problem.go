package portproxy

import (
	"encoding/json"
	"net/http"
)

// problem is an RFC 9457 problem document.
type problem struct {
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

// writeProblem answers status with a problem document.
func writeProblem(w http.ResponseWriter, status int, detail string) {
	b, err := json.Marshal(problem{Title: http.StatusText(status), Status: status, Detail: detail})
	if err != nil {
		// Three plain fields cannot fail to encode.
		b = []byte(`{"title":"Internal Server Error","status":500}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
