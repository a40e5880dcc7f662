package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
)

// duQuery is the query of the du routes.
func duQuery(path string, top int) url.Values {
	q := url.Values{}
	if path != "" {
		q.Set("path", path)
	}
	if top > 0 {
		q.Set("top", strconv.Itoa(top))
	}
	return q
}

// DiskUsage reports where the space under path ("" for /) went in a
// sandbox; top bounds each list (0: the daemon's default, 10).
func (c *Client) DiskUsage(ctx context.Context, id, path string, top int) (DiskUsage, error) {
	var out DiskUsage
	err := c.do(ctx, http.MethodGet, "/v1/sandboxes/"+url.PathEscape(id)+"/du", duQuery(path, top), nil, &out)
	return out, err
}

// VolumeDiskUsage reports where the space under path went in a volume.
func (c *Client) VolumeDiskUsage(ctx context.Context, id, path string, top int) (DiskUsage, error) {
	var out DiskUsage
	err := c.do(ctx, http.MethodGet, volumePath(id, "/du"), duQuery(path, top), nil, &out)
	return out, err
}
