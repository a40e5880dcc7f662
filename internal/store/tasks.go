package store

// TaskStore holds structured agent state: tasks, observations and
// key-value entries per sandbox. (Filled in by the structured-state work.)
type TaskStore interface{}
