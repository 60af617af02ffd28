package vip

// DropSYN is dropSYN, for the lab test of a handoff interrupted right
// after it (hamaster killed).
var DropSYN = dropSYN
