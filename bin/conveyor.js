#!/usr/bin/env node
// The published entry point: the compiled CLI (`npm run build` writes dist/).
await import("../dist/src/cli/bin.js");
