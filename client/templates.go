package client

import (
	"context"
	"net/http"
	"net/url"
)

// ListTemplates lists the templates sandboxes can be created from.
func (c *Client) ListTemplates(ctx context.Context) ([]Template, error) {
	list, err := listAll[Template](ctx, c, "/v1/templates", nil)
	return list, err
}

// ImportTemplate imports an OCI image as a template. It returns when the
// import is done, which for a registry image may take a while.
func (c *Client) ImportTemplate(ctx context.Context, req ImportTemplateRequest) (Template, error) {
	var t Template
	err := c.do(ctx, http.MethodPost, "/v1/templates", nil, req, &t)
	return t, err
}

// DeleteTemplate deletes a template that no sandbox uses.
func (c *Client) DeleteTemplate(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/templates/"+url.PathEscape(id), nil, nil, nil)
}
