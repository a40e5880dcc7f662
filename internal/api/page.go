package api

import (
	"fmt"
	"strconv"

	"github.com/danielgtaylor/huma/v2"

	"github.com/stead-dev/stead/client"
)

// defaultPageSize is the page size of a list request without limit.
const defaultPageSize = 100

// PageQuery holds the paging query parameters every list route takes.
type PageQuery struct {
	Limit int    `query:"limit" minimum:"0" maximum:"1000" doc:"At most this many items in the page (default 100, at most 1000)"`
	After string `query:"after" maxLength:"64" doc:"Cursor: the next of the previous page; empty or absent for the first page"`
}

// pageOf cuts the page in.After and in.Limit select out of list, the whole
// list in the order the backend returned it. The cursor is the position
// after the page's last item: an item created or deleted between two
// requests may shift the following pages by one (read them again from the
// start to see a consistent list). A cursor that is not one this function
// made is a 400.
func pageOf[T any](list []T, in PageQuery) (*out[client.Page[T]], error) {
	start := 0
	if in.After != "" {
		n, err := strconv.Atoi(in.After)
		if err != nil || n < 0 {
			return nil, huma.Error400BadRequest(fmt.Sprintf("after %q is not a cursor of this list: pass the next of the previous page", in.After))
		}
		start = min(n, len(list))
	}
	limit := in.Limit
	if limit <= 0 {
		limit = defaultPageSize
	}
	end := start + min(limit, len(list)-start)
	page := client.Page[T]{Items: append([]T{}, list[start:end]...), More: end < len(list)}
	if page.More {
		page.Next = strconv.Itoa(end)
	}
	return &out[client.Page[T]]{Body: page}, nil
}
