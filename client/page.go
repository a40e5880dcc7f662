package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
)

// Page is one page of a list: every list route of the API answers with
// this shape and takes the query parameters limit (page size) and after
// (the cursor: the previous page's Next). A client reads on while More is
// true, passing Next as after.
type Page[T any] struct {
	// Items are the page's entries, never null.
	Items []T `json:"items" doc:"The page's entries (an empty array when there are none)"`
	// Next is the cursor of the following page.
	Next string `json:"next,omitempty" doc:"Cursor of the following page: pass it as the after query parameter; empty when there is none"`
	// More is true when a following page may hold more entries.
	More bool `json:"more" doc:"Whether a following page may hold more entries: read on with after=next"`
}

// maxPageSize is the largest page the server serves; listAll asks for it.
const maxPageSize = 1000

// listAll reads every page of the list at path (with the query q) and
// returns their items in order.
func listAll[T any](ctx context.Context, c *Client, path string, q url.Values) ([]T, error) {
	out := []T{}
	after := ""
	for {
		pq := url.Values{}
		for k, v := range q {
			pq[k] = v
		}
		pq.Set("limit", strconv.Itoa(maxPageSize))
		if after != "" {
			pq.Set("after", after)
		}
		var page Page[T]
		if err := c.do(ctx, http.MethodGet, path, pq, nil, &page); err != nil {
			return nil, err
		}
		out = append(out, page.Items...)
		if !page.More || page.Next == "" || page.Next == after {
			return out, nil
		}
		after = page.Next
	}
}

// listPage reads one page of the list at path (with the query q).
func listPage[T any](ctx context.Context, c *Client, path string, q url.Values) (Page[T], error) {
	var page Page[T]
	err := c.do(ctx, http.MethodGet, path, q, nil, &page)
	if page.Items == nil {
		page.Items = []T{}
	}
	return page, err
}
