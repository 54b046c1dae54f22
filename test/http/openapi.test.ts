/**
 * The OpenAPI document is built from the schemas the routes validate with; the plugin mounts in
 * a user's own Fastify app without changing its other routes.
 */
import Fastify from "fastify";
import { describe, expect, it } from "vitest";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { conveyorHttp } from "../../src/http/index.js";
import { explicitObjects } from "../../src/http/openapi.js";
import { jobRequestSchema } from "../../src/http/routes/enqueue.js";
import { validate, type JsonSchema } from "../../src/http/schema.js";
import { send, serverPerTest, type Harness, type Obj } from "./harness.js";

const { temp, startTestServer } = serverPerTest();
let h: Harness | null = null;

type Operation = {
  operationId: string;
  requestBody?: { content: Record<string, { schema: JsonSchema }> };
  parameters?: Array<{ name: string; in: string; schema: JsonSchema }>;
  responses: Record<string, { content?: Record<string, { schema: JsonSchema }> }>;
};
type Doc = { openapi: string; servers: Array<{ url: string }>; paths: Record<string, Record<string, Operation>> };

const KNOWN_KEYWORDS = new Set([
  "type",
  "title",
  "description",
  "examples",
  "default",
  "format",
  "enum",
  "const",
  "properties",
  "required",
  "additionalProperties",
  "minProperties",
  "maxProperties",
  "items",
  "minItems",
  "maxItems",
  "minLength",
  "maxLength",
  "pattern",
  "minimum",
  "maximum",
  "anyOf",
  "readOnly",
  "deprecated",
]);

function keywords(schema: JsonSchema, out: Set<string>): void {
  for (const [k, v] of Object.entries(schema)) {
    out.add(k);
    if (k === "properties") for (const s of Object.values(v as Record<string, JsonSchema>)) keywords(s, out);
    if ((k === "items" || k === "additionalProperties") && typeof v === "object") keywords(v as JsonSchema, out);
    if (k === "anyOf") for (const s of v as JsonSchema[]) keywords(s, out);
  }
}

describe("GET /v1/openapi.json", () => {
  it("is an OpenAPI 3.1 document of every route, with the very schemas the validator uses", async () => {
    h = await startTestServer();
    const r = await h.request<Doc>("GET", "/v1/openapi.json");
    expect(r.status).toBe(200);
    const doc = r.json;
    expect(doc.openapi).toBe("3.1.0");
    expect(doc.servers[0]!.url).toBe("/v1");
    const ops = Object.values(doc.paths).flatMap((methods) => Object.values(methods));
    expect(new Set(ops.map((o) => o.operationId)).size).toBe(ops.length);
    expect(ops.length).toBeGreaterThanOrEqual(17);

    // The enqueue body schema is the route's own.
    const enqueue = doc.paths["/queues/{queue}/jobs"]!.post!;
    // The validator's schema, with every object's additionalProperties stated (its default, true).
    // As JSON: the TypeBox schema also carries symbol-keyed markers, which JSON leaves out.
    expect(enqueue.requestBody!.content["application/json"]!.schema).toEqual(JSON.parse(JSON.stringify(explicitObjects(jobRequestSchema))));
    expect(enqueue.parameters!.map((p) => `${p.in}:${p.name}`)).toEqual(["path:queue", "header:Idempotency-Key"]);
    expect(Object.keys(enqueue.responses).sort()).toEqual(["200", "202", "400", "401", "403", "409", "413", "415", "422"]);

    // Every schema in the document uses only keywords the validator implements.
    const used = new Set<string>();
    for (const op of ops) {
      for (const c of Object.values(op.requestBody?.content ?? {})) keywords(c.schema, used);
      for (const p of op.parameters ?? []) keywords(p.schema, used);
      for (const res of Object.values(op.responses)) for (const c of Object.values(res.content ?? {})) keywords(c.schema, used);
    }
    expect([...used].filter((k) => !KNOWN_KEYWORDS.has(k))).toEqual([]);

    // Every documented path exists (an admin-free server answers something other than "no route").
    for (const [template, methods] of Object.entries(doc.paths)) {
      for (const method of Object.keys(methods)) {
        const res = await h.request(
          method.toUpperCase(),
          "/v1" + template.replace("{queue}", "q").replace("{id}", "x"),
          method === "post" ? { body: {} } : { headersOnly: template === "/events" },
        );
        if (res.status === 404) expect((res.json as { type: string }).type, `${method} ${template}`).not.toBe("urn:conveyor:problem:no-route");
      }
    }
  });

  it("documents responses that match what the server sends", async () => {
    h = await startTestServer();
    const doc = (await h.request<Doc>("GET", "/v1/openapi.json")).json;
    const accepted = await h.request("POST", "/v1/queues/q/jobs", { body: { name: "n" } });
    const schema202 = doc.paths["/queues/{queue}/jobs"]!.post!.responses["202"]!.content!["application/json"]!.schema;
    expect(validate(schema202, accepted.json, "body").issues).toEqual([]);
    const id = (accepted.json as { jobId: string }).jobId;
    const status = await h.request("GET", `/v1/jobs/${id}`);
    expect(validate(doc.paths["/jobs/{id}"]!.get!.responses["200"]!.content!["application/json"]!.schema, status.json, "body").issues).toEqual([]);
    const queues = await h.request("GET", "/v1/queues");
    expect(validate(doc.paths["/queues"]!.get!.responses["200"]!.content!["application/json"]!.schema, queues.json, "body").issues).toEqual([]);
    const problem = await h.request("GET", "/v1/jobs/nope");
    expect(validate(doc.paths["/jobs/{id}"]!.get!.responses["404"]!.content!["application/problem+json"]!.schema, problem.json, "body").issues).toEqual([]);
  });
});

describe("request validation (Ajv: no coercion, no stripping, no defaults)", () => {
  it("reports every issue with a JSON Pointer, escapes keys, and parses only query and path values", () => {
    const schema: JsonSchema = {
      type: "object",
      additionalProperties: false,
      required: ["n"],
      properties: { n: { type: "integer", minimum: 1 }, "a/b~c": { type: "string", maxLength: 2 }, flag: { type: "boolean" } },
    };
    expect(
      validate(schema, { n: 0, "a/b~c": "long", extra: 1 }, "body")
        .issues.map((i) => i.pointer)
        .sort(),
    ).toEqual(["/a~1b~0c", "/extra", "/n"]);
    // A body is checked as sent: "5" is not coerced to 5, nor 5 to "5"; an unknown property is
    // refused, not silently dropped; no default is written into it.
    expect(validate(schema, { n: "5" }, "body").issues).toEqual([{ in: "body", pointer: "/n", detail: 'must be an integer; got "5"' }]);
    const withExtra = { n: 1, extra: true };
    expect(validate(schema, withExtra, "body").issues).toEqual([
      { in: "body", pointer: "/extra", detail: expect.stringMatching(/^is not a known property/) as string },
    ]);
    expect(withExtra).toEqual({ n: 1, extra: true });
    const withDefault = { type: "object", properties: { limit: { type: "integer", default: 50 } } } as const satisfies JsonSchema;
    const empty = {};
    expect(validate(withDefault, empty, "body")).toEqual({ issues: [], value: {} });
    expect(validate(withDefault, {}, "querystring", true)).toEqual({ issues: [], value: {} });
    expect(validate({ type: "object", properties: { s: { type: "string" } } }, { s: 5 }, "body").issues[0]!.detail).toBe("must be a string; got 5");
    expect(validate(schema, { n: "5", flag: "true" }, "querystring", true)).toEqual({ issues: [], value: { n: 5, flag: true } });
    expect(validate(schema, { n: "5.5" }, "querystring", true).issues[0]!.detail).toMatch(/integer/);
    expect(validate(schema, {}, "body").issues[0]).toMatchObject({ pointer: "/n", detail: "is required" });
  });

  it("explains a failed anyOf by the alternative whose shape fits", () => {
    const backoff = jobRequestSchema.properties.options.properties.backoff;
    expect(validate(backoff, { type: "fixed" }, "body").issues).toEqual([{ in: "body", pointer: "/delayMs", detail: "is required" }]);
    expect(validate(backoff, { type: "linear" }, "body").issues[0]!.detail).toMatch(/"type": "exponential".*"type": "fixed"/);
    expect(validate(backoff, { type: "exponential", delayMs: 5 }, "body").issues).toEqual([]);
  });
});

describe("mounted in your own Fastify app", () => {
  it("lives under its prefix and leaves the app's other routes, parsers and errors alone", async () => {
    const backend = new SqliteBackend({ path: await temp.file("jobs.db") });
    const app = Fastify();
    app.post("/echo", async (request) => ({ got: request.body }));
    app.get("/boom", async () => {
      throw new Error("app error");
    });
    await app.register(conveyorHttp, { backend, apiKeys: false, prefix: "/jobs-api" });
    await app.listen({ port: 0, host: "127.0.0.1" });
    const base = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
    try {
      const r = await send<{ pollUrl: string }>(base, "POST", "/jobs-api/v1/queues/q/jobs", { body: { name: "n" } });
      expect(r.status).toBe(202);
      expect(r.json.pollUrl).toMatch(/^\/jobs-api\/v1\/jobs\//);
      expect((await send(base, "GET", r.json.pollUrl)).status).toBe(200);
      // The app still parses text/plain and keeps Fastify's own error format.
      const echo = await send<Obj>(base, "POST", "/echo", { raw: "plain text", headers: { "content-type": "text/plain" } });
      expect(echo.json).toEqual({ got: "plain text" });
      const boom = await send<Obj>(base, "GET", "/boom");
      expect(boom.status).toBe(500);
      expect(boom.headers.get("content-type")).toMatch(/^application\/json/);
      expect((await send(base, "GET", "/jobs-api/v1/openapi.json")).json).toMatchObject({ servers: [{ url: "/jobs-api/v1" }] });
    } finally {
      await app.close();
      await backend.close();
    }
  });
});
