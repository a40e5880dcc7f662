package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// Orient returns what a resuming agent must read first: why and when the
// sandbox stopped, its latest checkpoints, the tails of files (empty: the
// workspace's decisions.md and plan.md), the latest session run with its
// in-doubt tool intents and its last events (at most events; 0 means the
// server's default of 20). Orient.Text is ready for a model's prompt.
func (c *Client) Orient(ctx context.Context, id string, files []string, events int) (Orient, error) {
	q := url.Values{}
	if len(files) > 0 {
		q.Set("files", strings.Join(files, ","))
	}
	if events > 0 {
		q.Set("events", strconv.Itoa(events))
	}
	var out Orient
	err := c.do(ctx, http.MethodGet, "/v1/sandboxes/"+url.PathEscape(id)+"/orient", q, nil, &out)
	return out, err
}
