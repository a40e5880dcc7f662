// Package envd holds the wire format of E2B's in-sandbox data plane
// ("envd") as the official SDKs speak it: Connect RPC with the JSON codec
// (unary calls as a plain JSON POST, server streams as enveloped JSON
// frames ending in an end-of-stream frame), and the JSON forms of the
// messages of the process.Process and filesystem.Filesystem services.
//
// The messages are written by hand from the services' published shape
// (package, service, method and field names as the SDKs use them); the
// JSON field names follow protobuf's JSON mapping (lowerCamelCase,
// int64 as a string, bytes as base64, enums by name, Timestamp as RFC
// 3339). Decoders accept the original snake_case names too, as protobuf
// JSON parsers do.
package envd
