// Package docs holds outboxrelay's documentation pages, README.md's
// companions. It has no code: its tests keep the pages' relative links and
// anchors resolving, the README linking every page, and every test a page
// names existing. (The configuration table and the YAML examples are
// checked against the loader in cmd/outboxrelay/internal/config.)
package docs
