/** Moved to testkit/servers/prometheus.ts (shared by tests, bench and chaos); this path stays for existing imports. */
export * from "../../testkit/servers/prometheus.js";
