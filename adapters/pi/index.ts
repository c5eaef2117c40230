/**
 * context_os for Pi: every model call's messages are assembled by context_os.
 *
 * Pi fires `context` before each model call with the conversation (no system messages); this
 * extension sends those messages to a `ctxos serve --stdio` child (JSON-RPC `context.transform`,
 * harness "pi") and returns the assembled list, which Pi sends instead. It also registers the tools
 * context_os gives the agent: `read` (replacing Pi's own), `activate` and `deactivate`, answered
 * by the same child (`tools.call`).
 *
 * It fails open. If ctxos cannot start, exits, answers with an error, answers something Pi cannot
 * use, or does not answer within CTXOS_TIMEOUT_MS, context_os is off for the rest of the session:
 * Pi sends its own context (with our read reports in it made Pi's reads again), `read` is Pi's
 * read again, `activate`/`deactivate` are withdrawn, and the extension says so once (a
 * notification in the TUI, a line on stderr in print/JSON mode).
 *
 * Configuration (environment): CTXOS_CMD, the command that runs ctxos (default `ctxos`; quoted
 * words allowed, e.g. `"/opt/my venv/bin/ctxos"` or `uv run ctxos`); CTXOS_STORE, the
 * store URL, which ctxos itself reads; CTXOS_POLICY, a JSON object of retention settings for the
 * session (e.g. {"collapse_after_turns": 2}); CTXOS_TIMEOUT_MS, how long one call may take (default 30000);
 * CTXOS_RECALL=1 (or true/yes/on), the `recall` tool (and recall at each user message); CTXOS_MEMORY=1, the
 * `remember` tool and the memory index pinned in context (docs/recall.md); CTXOS_MESH=NAME, the
 * agent on the mesh as NAME (`ctxos serve --mesh NAME`, more serve flags in CTXOS_MESH_ARGS, e.g.
 * `--mesh-connect /ip4/…/p2p/… --no-mesh-mdns`) with the nine mesh tools (docs/mesh.md).
 * The context_os session id is Pi's session id; the workspace is Pi's working directory.
 *
 * This module must never make Pi fail: every error ends in `off()`, never in a throw to Pi.
 */

import type {
	ContextEvent,
	ExtensionAPI,
	ExtensionContext,
	ExtensionToolContext,
	ToolDefinition,
} from "@earendil-works/pi-coding-agent";
// The legacy package name on purpose: Pi 1.5.x maps it to itself, and Pi 0.7x knows no other.
import { createReadToolDefinition } from "@mariozechner/pi-coding-agent";
import { CallAborted, MAX_TIMEOUT_MS, RpcChild, RpcError, splitCommand } from "./rpc.ts";

const HARNESS = "pi";
/** The largest `context.transform` request ctxos takes from us: its own cap's highest setting (a
 * conversation past it could not be serialised by Node anyway, a string's limit being near 1 GiB). */
const MAX_REQUEST_MB = 1024;
const DEFAULT_TIMEOUT_MS = 30_000;
const STATUS_KEY = "context_os";
/** Settings the extension could not read, each with what it does instead: said at session start. */
const CONFIG_PROBLEMS: string[] = [];
/** The words an on/off setting takes (any case). */
const ON = ["1", "true", "yes", "on"];
const OFF = ["", "0", "false", "no", "off"];
/** Recall and memory, when configured: read once, when Pi loads the extension. */
const RECALL = flag("CTXOS_RECALL", "recall");
const MEMORY = flag("CTXOS_MEMORY", "remember");
/** How long one call to ctxos may take. */
const TIMEOUT_MS = timeoutSetting();
/** The agent's name on the mesh, when it joins one. */
const MESH = process.env.CTXOS_MESH?.trim() || undefined;
/** The seed's nine (their definitions: MESH_TOOLS, below). */
const MESH_TOOL_NAMES: readonly string[] = [
	"mesh_list_peers",
	"mesh_send",
	"mesh_broadcast",
	"mesh_discover",
	"mesh_prune",
	"memory_store",
	"memory_recall",
	"memory_search",
	"memory_keys",
];
/** The tools only context_os can answer: withdrawn when it is off. */
const CONTEXT_TOOLS: readonly string[] = [
	"activate",
	"deactivate",
	"lines",
	"history",
	...(RECALL ? ["recall"] : []),
	...(MEMORY ? ["remember"] : []),
	...(MESH ? MESH_TOOL_NAMES : []),
];

interface TransformResult {
	messages: unknown;
	turn?: number;
	tokens_assembled?: number;
	tokens_full?: number;
}

interface ToolCallResult {
	output: string;
	is_error: boolean;
}

/** One session's link to ctxos: started at session start, off at the first failure. */
class ContextOs {
	private rpc: RpcChild | undefined;
	private ready: Promise<RpcChild | undefined> | undefined;
	private offReason: string | undefined;
	private session = "";
	/** The tools ctxos offers this session (`tools.list`): `read` only when it manages files. */
	private offered = new Set<string>();
	/** With context_os off: what Pi's read gave in place of each of our read reports, by call id. */
	readonly readsAgain = new Map<string, unknown>();

	constructor(private readonly pi: ExtensionAPI) {}

	/** Starts ctxos and opens the session, once; does not wait. */
	start(ctx: ExtensionContext): void {
		this.ready ??= this.open(ctx);
	}

	/** The child when context_os is on (waiting for the start if it is under way), else undefined. */
	async connection(ctx: ExtensionContext): Promise<RpcChild | undefined> {
		this.start(ctx);
		const rpc = await this.ready;
		return this.offReason === undefined ? rpc : undefined;
	}

	offers(tool: string): boolean {
		return this.offReason === undefined && this.offered.has(tool);
	}

	get sessionId(): string {
		return this.session;
	}

	/** Turns context_os off for this session and says so, once. Never throws. */
	off(ctx: ExtensionContext, reason: string): void {
		if (this.offReason !== undefined) return;
		this.offReason = reason;
		void this.rpc?.close();
		try {
			const active = this.pi.getActiveTools();
			const kept = active.filter((name) => !CONTEXT_TOOLS.includes(name));
			if (kept.length !== active.length) this.pi.setActiveTools(kept);
		} catch {
			// the tools stay; each answers that context_os is off
		}
		try {
			warn(ctx, `context_os is off: ${reason.replace(/\.$/, "")}. Pi carries on with its own context.`);
			if (ctx.hasUI) ctx.ui.setStatus(STATUS_KEY, "context_os: off");
		} catch {
			// a context Pi has since retired (the session ended meanwhile): nothing to tell
		}
	}

	get reason(): string {
		return this.offReason ?? "";
	}

	/** Ends the child; resolves when it is gone (at most about 4 s: see RpcChild.close). */
	close(): Promise<void> {
		return this.rpc?.close() ?? Promise.resolve();
	}

	private async open(ctx: ExtensionContext): Promise<RpcChild | undefined> {
		this.session = ctx.sessionManager.getSessionId();
		let argv: string[];
		try {
			// the server may give sessions only the workspace granted here: Pi's working directory
			argv = [...splitCommand(process.env.CTXOS_CMD?.trim() || "ctxos"), "serve", "--stdio", "--workspace", ctx.cwd];
			// every call sends the whole conversation: one past the server's default cap (32 MiB; a
			// few images) was refused, and context_os went off for the session
			argv.push("--max-request-mb", String(MAX_REQUEST_MB));
			if (MESH) argv.push("--mesh", MESH, ...splitCommand(process.env.CTXOS_MESH_ARGS?.trim() || ""));
		} catch (e) {
			this.off(ctx, `CTXOS_CMD: ${message(e)}`);
			return undefined;
		}
		let policy: object | undefined;
		try {
			policy = jsonObject(process.env.CTXOS_POLICY);
		} catch (e) {
			this.off(ctx, `CTXOS_POLICY: ${message(e)}`);
			return undefined;
		}
		// a child that exits between calls (killed, crashed) turns context_os off then: at the next
		// call it was too late, that call's tools being settled before its `context` event (the
		// model was offered activate & co., which could only answer that context_os is off)
		const onExit = (gone: Error) => this.off(ctx, gone.message);
		const rpc = new RpcChild(argv, TIMEOUT_MS, { cwd: ctx.cwd, env: process.env, onExit });
		this.rpc = rpc;
		try {
			const sources = { recall: RECALL, memory: MEMORY, mesh: MESH !== undefined };
			// cut: Pi cannot be asked to send less, so a message over the cap (a pasted log, a huge
			// @file) is held cut, with a note, rather than refused (which turned context_os off)
			await rpc.call("session.open", {
				session: this.session,
				harness: HARNESS,
				workspace: ctx.cwd,
				policy,
				cut: true,
				...sources,
			});
			const tools = await rpc.call<unknown>("tools.list", { session: this.session });
			this.offered = new Set(toolNames(tools));
			// a peer ctxos could not dial leaves the agent alone on the mesh: its stderr never shows
			if (MESH) for (const problem of bootstrapFailures(await rpc.call<unknown>("mesh.status", {}))) warn(ctx, problem);
		} catch (e) {
			this.off(ctx, `could not open session ${this.session}: ${describe(e)}`);
			return undefined;
		}
		if (ctx.hasUI) ctx.ui.setStatus(STATUS_KEY, "context_os: on");
		return rpc;
	}
}

/** How often an idle agent on the mesh asks ctxos for a peer's request. */
const MESH_POLL_MS = 500;

interface MeshRequest {
	requestId: string;
	text: string;
}

/**
 * Peers' requests as turns of the agent (seed: the FIFO request queue): while Pi is idle, the
 * oldest request waiting (`mesh.next_request`) becomes a user message; the text the run ends with
 * is the answer (`mesh.answer`). One at a time: ctxos hands out no other until it is answered.
 */
class MeshTurns {
	private holding: string | undefined;
	private polling = false;
	private timer: ReturnType<typeof setInterval> | undefined;

	constructor(
		private readonly pi: ExtensionAPI,
		private readonly link: ContextOs,
	) {}

	start(ctx: ExtensionContext): void {
		this.timer ??= setInterval(() => void this.poll(ctx), MESH_POLL_MS);
		this.timer.unref?.(); // never what keeps Pi running
	}

	stop(): void {
		if (this.timer !== undefined) clearInterval(this.timer);
		this.timer = undefined;
	}

	private async poll(ctx: ExtensionContext): Promise<void> {
		if (this.polling || this.holding !== undefined || !ctx.isIdle() || ctx.hasPendingMessages()) return;
		this.polling = true;
		try {
			const rpc = await this.link.connection(ctx);
			if (!rpc) return this.stop();
			const got = await rpc.call<{ request: MeshRequest | null }>("mesh.next_request", { timeout: 0 });
			if (!got?.request) return;
			this.holding = got.request.requestId;
			this.pi.sendUserMessage(got.request.text);
		} catch (e) {
			warn(ctx, `context_os: no more mesh requests this session: ${describe(e)}`);
			this.stop();
		} finally {
			this.polling = false;
		}
	}

	/** The run a request started ended: its last assistant text goes back to the peer. */
	async ended(messages: readonly unknown[], ctx: ExtensionContext): Promise<void> {
		const requestId = this.holding;
		if (requestId === undefined) return;
		this.holding = undefined;
		const answer = lastAssistantText(messages);
		const rpc = await this.link.connection(ctx);
		if (!rpc) return;
		try {
			await rpc.call("mesh.answer", {
				requestId,
				text: answer ?? "[error] the agent ended its turn without an answer",
				error: answer === undefined,
			});
		} catch (e) {
			warn(ctx, `context_os: could not answer mesh request ${requestId}: ${describe(e)}`);
		}
	}
}

/** The text of the last assistant message that has any. */
function lastAssistantText(messages: readonly unknown[]): string | undefined {
	for (let i = messages.length - 1; i >= 0; i--) {
		const m = messages[i] as { role?: unknown; content?: unknown };
		if (m?.role !== "assistant" || !Array.isArray(m.content)) continue;
		const text = m.content
			.filter((c): c is { type: "text"; text: string } => c?.type === "text" && typeof c.text === "string")
			.map((c) => c.text)
			.join("")
			.trim();
		if (text) return text;
	}
	return undefined;
}

export default function contextOs(pi: ExtensionAPI): void {
	// One link per extension instance: Pi loads the extension anew for every session it switches to.
	const link = new ContextOs(pi);
	const mesh = MESH ? new MeshTurns(pi, link) : undefined;

	pi.on("session_start", (_event, ctx) => {
		for (const problem of CONFIG_PROBLEMS) warn(ctx, `context_os: ${problem}`);
		link.start(ctx);
		mesh?.start(ctx);
	});

	pi.on("agent_end", async (event, ctx) => {
		await mesh?.ended(event.messages, ctx);
	});

	// The run's tools are settled here: waiting for ctxos lets a failed start withdraw
	// activate/deactivate before the first model call rather than after it.
	pi.on("before_agent_start", async (_event, ctx) => {
		await link.connection(ctx);
	});

	// Pi exits when its shutdown handlers are done: waiting here lets a child that lingers be killed
	pi.on("session_shutdown", async () => {
		mesh?.stop();
		await link.close();
	});

	pi.on("context", async (event, ctx) => {
		// a run aborted while a tool ran (Esc, `abort` over RPC) still fires `context` for the next
		// call, which Pi then does not make: no frame for it (its messages reach ctxos at the next call)
		const signal = ctx.signal;
		if (signal?.aborted) return undefined;
		// an abort (Esc, SIGTERM) while ctxos starts or assembles takes effect at once, not when it
		// answers or times out: the call is given up, context_os stays on
		const rpc = await untilAborted(link.connection(ctx), signal);
		if (rpc === ABORTED) return undefined;
		if (!rpc) return ownReads(event.messages, ctx, link.readsAgain);
		let result: TransformResult;
		try {
			result = await rpc.call<TransformResult>(
				"context.transform",
				{ session: link.sessionId, messages: event.messages },
				{ signal },
			);
		} catch (e) {
			if (e instanceof CallAborted) return undefined;
			link.off(ctx, `context.transform failed: ${describe(e)}`);
			return ownReads(event.messages, ctx, link.readsAgain);
		}
		const problem = unusable(result?.messages);
		if (problem) {
			link.off(ctx, `context.transform returned messages Pi cannot use (${problem})`);
			return ownReads(event.messages, ctx, link.readsAgain);
		}
		if (ctx.hasUI && result.tokens_assembled !== undefined && result.tokens_full !== undefined) {
			ctx.ui.setStatus(STATUS_KEY, `context_os: turn ${result.turn} · ${result.tokens_assembled}/${result.tokens_full} tokens`);
		}
		return { messages: result.messages as typeof event.messages };
	});

	pi.registerTool(readTool(link));
	pi.registerTool(contextTool(link, "activate", ACTIVATE));
	pi.registerTool(contextTool(link, "deactivate", DEACTIVATE));
	pi.registerTool(contextTool(link, "lines", LINES_TEXTS, LINES_PARAMETERS));
	pi.registerTool(contextTool(link, "history", HISTORY_TEXTS, HISTORY_PARAMETERS));
	if (RECALL) pi.registerTool(contextTool(link, "recall", RECALL_TEXTS, RECALL_PARAMETERS));
	if (MEMORY) pi.registerTool(contextTool(link, "remember", REMEMBER_TEXTS, REMEMBER_PARAMETERS));
	if (MESH) for (const name of MESH_TOOL_NAMES) pi.registerTool(contextTool(link, name, MESH_TOOLS[name], MESH_TOOLS[name].parameters));
}

// --- tools ---------------------------------------------------------------------------------------

interface Texts {
	label: string;
	description: string;
	snippet: string;
}

const ACTIVATE: Texts = {
	label: "activate",
	description:
		"Load an object's full content back into your context: an id from the context_os index " +
		"(file:…, toolcall:…) or a file path. Collapsed tool results name the id to activate.",
	snippet: "Load a collapsed tool result or a file (by id or path) back into context",
};
const DEACTIVATE: Texts = {
	label: "deactivate",
	description:
		"Collapse an object (an id such as file:… or toolcall:…, or a file path) to its one-line " +
		"metadata to free context. It stays listed and can be activated again.",
	snippet: "Collapse an object you no longer need to its one-line metadata",
};

const LINES_TEXTS: Texts = {
	label: "lines",
	description:
		"Show lines of an object's stored text as this tool's output: the part of a long tool result " +
		"its clipped view leaves out, or any part of a file version. Changes nothing in your context.",
	snippet: "Show the lines a clipped tool result leaves out",
};
const HISTORY_TEXTS: Texts = {
	label: "history",
	description:
		"Show earlier messages of this conversation that are no longer in your context (behind its " +
		"history horizon), by chat entry number: tool results as one-line stubs, activate(ref) loads one.",
	snippet: "Show earlier messages of this conversation that left your context",
};
const RECALL_TEXTS: Texts = {
	label: "recall",
	description:
		"Search everything context_os has stored (past messages, tool outputs, file versions, memories, " +
		"other sessions). Hits enter your object index; activate(id) loads one. as_of (ISO 8601) searches what was true then.",
	snippet: "Search past messages, tool outputs, files and memories",
};
const REMEMBER_TEXTS: Texts = {
	label: "remember",
	description:
		"Remember one fact for later sessions: appended as a line to the memory index (or a topic file), " +
		"never rewriting what is there. Keep it short and self-contained.",
	snippet: "Remember one fact for later sessions",
};

/** JSON Schema, as Pi takes it: Pi validates any JSON Schema, and building these with TypeBox at
 * run time would be one more module to resolve through Pi's loader. */
type Schema = ToolDefinition["parameters"];

const ID_PARAMETERS: Schema = {
	type: "object",
	properties: { id: { type: "string", description: "Object id (file:…, toolcall:…) or a file path" } },
	required: ["id"],
	additionalProperties: false,
};

const HISTORY_PARAMETERS: Schema = {
	type: "object",
	properties: {
		start: { type: "integer", description: "First chat entry to show (default: the 40 before the horizon)" },
		end: { type: "integer", description: "Show the entries before this one (default: the horizon)" },
	},
	required: [],
	additionalProperties: false,
};

const LINES_PARAMETERS: Schema = {
	type: "object",
	properties: {
		id: { type: "string", description: 'Object id (toolcall:…, file:…) or a tool result\'s ref ("r12")' },
		start: { type: "integer", description: "First line to show, from 1 (default 1)" },
		end: { type: "integer", description: "Last line to show (default: 200 lines from start)" },
		column: {
			type: "integer",
			description: "Character of line start to begin at, from 1 (default 1): the rest of a line too long to show at once",
		},
	},
	required: ["id"],
	additionalProperties: false,
};

const RECALL_PARAMETERS: Schema = {
	type: "object",
	properties: {
		query: { type: "string", description: "What to look for, in words" },
		k: { type: "integer", description: "How many hits (default 5)" },
		kinds: { type: "array", items: { type: "string" }, description: "Only these kinds (chat, toolcall, file, memory)" },
		session: { type: "string", description: "Only this session's objects" },
		as_of: { type: "string", description: "A past time, ISO 8601: what was valid and known then" },
	},
	required: ["query"],
	additionalProperties: false,
};

const REMEMBER_PARAMETERS: Schema = {
	type: "object",
	properties: {
		text: { type: "string", description: "The fact, one line" },
		scope: { type: "string", enum: ["project", "global"], description: "project (default) or global" },
		topic: { type: "string", description: "A topic file name for detail" },
	},
	required: ["text"],
	additionalProperties: false,
};

/** The seed's nine mesh tools, as `ctxos serve` answers them (context/mesh_tools.py holds the same
 * schemas: the end-to-end test checks that they agree). */
const NO_PARAMETERS: Schema = { type: "object", properties: {}, required: [], additionalProperties: false };
const PEER_ID = { type: "string", description: "The peer: its id, or its agent name" };
const MESH_TOOLS: Record<string, Texts & { parameters: Schema }> = {
	mesh_list_peers: {
		label: "mesh_list_peers",
		description:
			"List every known mesh peer: peer id, agent name, status (connected, disconnected, discovered, or announced: " +
			"running on this machine, not dialled yet), addresses.",
		snippet: "List the agents on the mesh",
		parameters: NO_PARAMETERS,
	},
	mesh_send: {
		label: "mesh_send",
		description:
			"Send a direct message to a peer agent and wait for its answer (up to 60 s). Use mesh_list_peers first for " +
			"the peer id. autoReply asks the peer to acknowledge at once without its agent.",
		snippet: "Send a message to another agent and wait for its answer",
		parameters: {
			type: "object",
			properties: {
				peerId: {
					type: "string",
					description: "The peer's id (12D3KooW…), or the name of an agent running on this machine",
				},
				message: { type: "string", description: "What to say" },
				autoReply: { type: "boolean", description: "Ask for an automatic acknowledgement" },
			},
			required: ["peerId", "message"],
			additionalProperties: false,
		},
	},
	mesh_broadcast: {
		label: "mesh_broadcast",
		description: "Publish a message to every peer on the mesh (GossipSub).",
		snippet: "Announce something to every agent on the mesh",
		parameters: {
			type: "object",
			properties: {
				message: { type: "string", description: "What to announce" },
				type: { type: "string", enum: ["announce", "query", "response", "event"], description: "Its kind" },
			},
			required: ["message"],
			additionalProperties: false,
		},
	},
	mesh_discover: {
		label: "mesh_discover",
		description:
			"Look for new peers (a search of the DHT, when the mesh runs one) and report the peers discovered in the" +
			" last minute.",
		snippet: "Report newly discovered agents",
		parameters: NO_PARAMETERS,
	},
	mesh_prune: {
		label: "mesh_prune",
		description: "Remove every disconnected peer from the peer list.",
		snippet: "Forget disconnected agents",
		parameters: NO_PARAMETERS,
	},
	memory_store: {
		label: "memory_store",
		description:
			"Remember a fact about a peer (a decision, a preference, a constraint) under a key; entries are appended, " +
			"never overwritten. Save what matters after a meaningful exchange, not the raw conversation.",
		snippet: "Remember a fact about another agent",
		parameters: {
			type: "object",
			properties: {
				peerId: { type: "string", description: "The peer the fact is about: its id, or its agent name" },
				key: { type: "string", description: "A category: prefs, decision, project_context, …" },
				value: { type: "string", description: "The fact" },
				metadata: { type: "object", description: "Extra text or number fields" },
			},
			required: ["peerId", "key", "value"],
			additionalProperties: false,
		},
	},
	memory_recall: {
		label: "memory_recall",
		description:
			"Recall what you stored about a peer, by key, newest first (give peerId, key, or both). The latest exchange " +
			"and the best matches are already recalled for each incoming request; use this for more.",
		snippet: "Recall what you know of another agent",
		parameters: {
			type: "object",
			properties: {
				peerId: PEER_ID,
				key: { type: "string", description: "The key (exchange, broadcast, or one you stored)" },
				limit: { type: "integer", minimum: 1, description: "How many entries (default 10, at most 50)" },
				fullText: { type: "boolean", description: "Values uncut (default: cut to 10,000 characters)" },
			},
			required: [],
			additionalProperties: false,
		},
	},
	memory_search: {
		label: "memory_search",
		description:
			"Search every memory of every peer (or of one) by meaning and words, e.g. 'what did we decide about " +
			"performance?'.",
		snippet: "Search what you know of other agents",
		parameters: {
			type: "object",
			properties: {
				query: { type: "string", description: "What to look for" },
				peerId: { type: "string", description: "Only this peer's memories (its id, or its agent name)" },
				nResults: { type: "integer", minimum: 1, description: "How many results (default 5)" },
			},
			required: ["query"],
			additionalProperties: false,
		},
	},
	memory_keys: {
		label: "memory_keys",
		description: "List the keys stored for a peer, with how many entries each holds.",
		snippet: "List the keys stored for another agent",
		parameters: { type: "object", properties: { peerId: PEER_ID }, required: ["peerId"], additionalProperties: false },
	},
};

const READ_PARAMETERS: Schema = {
	type: "object",
	properties: {
		path: { type: "string", description: "Path to the file to read (relative or absolute)" },
		offset: { type: "number", description: "Line number to start reading from (1-indexed)" },
		limit: { type: "number", description: "Maximum number of lines to read" },
	},
	required: ["path"],
	additionalProperties: false,
};

interface ReadParams {
	path: string;
	offset?: number;
	limit?: number;
}

function readTool(link: ContextOs): ToolDefinition<Schema, unknown> {
	return {
		name: "read",
		label: "read",
		description:
			"Read a file. With context_os on, the file becomes an object in your context: its text is shown " +
			"in the <context_os> block at the end of the conversation (your own write and edit show its new " +
			"version there; a change made any other way only marks the block stale, until you read it again), " +
			"and the result reports indexing and activation. With offset/limit, the lines are returned directly.",
		promptSnippet: "Read file contents",
		promptGuidelines: ["Use read to examine files instead of cat or sed."],
		parameters: READ_PARAMETERS,
		async execute(toolCallId, params, signal, onUpdate, ctx) {
			const p = params as ReadParams;
			const rangeRead = p.offset !== undefined || p.limit !== undefined;
			const rpc = rangeRead ? undefined : await link.connection(ctx);
			if (rpc && link.offers("read")) {
				try {
					const r = await rpc.call<ToolCallResult>("tools.call", {
						session: link.sessionId,
						name: "read",
						arguments: { path: piPath(p.path) },
					});
					// what context_os cannot read (outside the workspace, …), Pi reads itself; and an
					// image, which context_os keeps as metadata only, Pi's read gives the model as an image
					if (!r.is_error && !piShowsImage(r.output)) {
						return { content: [{ type: "text", text: r.output }], details: contextOsDetails() };
					}
				} catch (e) {
					link.off(ctx, `read failed: ${describe(e)}`);
				}
			}
			return createReadToolDefinition(ctx.cwd).execute(toolCallId, p, signal, onUpdate, ctx);
		},
	};
}

/** A path as Pi's own tools take it (its normalizePath): Unicode spaces as spaces, a leading "@"
 * dropped (a model writes "@src/app.ts" as files are mentioned in Pi's editor). Without it such a
 * read failed in context_os, Pi's own read answered, and the file never became an object. */
function piPath(path: string): string {
	const spaced = path.replace(/[\u00A0\u2000-\u200A\u202F\u205F\u3000]/g, " ");
	return spaced.startsWith("@") ? spaced.slice(1) : spaced;
}

/** The image types Pi's own read gives the model as an image block (its SUPPORTED_IMAGE_MIME_TYPES). */
const PI_IMAGE_TYPES: readonly string[] = ["image/png", "image/jpeg", "image/webp", "image/gif"];

/** Whether a report of context_os's read is of an image Pi's read shows: context_os keeps binary
 * files as metadata only, so its report would leave the model without the picture. */
function piShowsImage(report: string): boolean {
	try {
		const r = JSON.parse(report) as { binary?: unknown; mime?: unknown } | null;
		return r?.binary === true && typeof r.mime === "string" && PI_IMAGE_TYPES.includes(r.mime);
	} catch {
		return false;
	}
}

function contextTool(
	link: ContextOs,
	name: string,
	texts: Texts,
	parameters: Schema = ID_PARAMETERS,
): ToolDefinition<Schema, unknown> {
	return {
		name,
		label: texts.label,
		description: texts.description,
		promptSnippet: texts.snippet,
		parameters,
		async execute(_toolCallId, params, _signal, _onUpdate, ctx) {
			const rpc = await link.connection(ctx);
			if (!rpc) return errorResult(`context_os is off (${link.reason}): ${name} has nothing to act on`);
			try {
				const r = await rpc.call<ToolCallResult>("tools.call", { session: link.sessionId, name, arguments: params });
				return { content: [{ type: "text", text: r.output }], details: contextOsDetails(), isError: r.is_error };
			} catch (e) {
				link.off(ctx, `${name} failed: ${describe(e)}`);
				return errorResult(`context_os is off (${link.reason})`);
			}
		},
	};
}

/** Marks a tool result as context_os's (Pi keeps `details` in the session, the model never sees it). */
function contextOsDetails() {
	return { contextOs: true };
}

function errorResult(text: string) {
	return { content: [{ type: "text" as const, text }], details: contextOsDetails(), isError: true };
}

// --- helpers -------------------------------------------------------------------------------------

type Messages = ContextEvent["messages"];

/** A result of our `read` in Pi's messages: context_os's report, standing for the file's text
 * (not one of a file context_os withheld, a secret or a binary: that stays as it is). */
function isReadReport(m: unknown): m is { role: "toolResult"; toolCallId: string } {
	const r = m as {
		role?: unknown;
		toolName?: unknown;
		toolCallId?: unknown;
		content?: unknown;
		details?: { contextOs?: unknown };
	};
	return (
		r?.role === "toolResult" &&
		r.toolName === "read" &&
		typeof r.toolCallId === "string" &&
		r.details?.contextOs === true &&
		!withheld(r.content)
	);
}

/** Whether a report of our read says context_os kept the file's content out (`content_omitted`). */
function withheld(content: unknown): boolean {
	const first = Array.isArray(content) ? (content[0] as { text?: unknown } | undefined) : undefined;
	try {
		const text = typeof first?.text === "string" ? first.text : "null";
		const report = JSON.parse(text) as Record<string, unknown> | null;
		return report?.content_omitted !== undefined;
	} catch {
		return false;
	}
}

/**
 * Pi's own context, with context_os off: a report of our `read` holds none of the file's text
 * (that showed only in context_os's blocks), so each becomes what Pi's read gives for the same
 * path, read once (`cache`, by call id) and kept for the session. Without it the model would lose
 * every file it read before context_os went off, or in a session resumed with context_os off.
 * Undefined (Pi's messages as they are) when there is no report, or when anything goes wrong.
 */
async function ownReads(
	messages: Messages,
	ctx: ExtensionContext,
	cache: Map<string, unknown>,
): Promise<{ messages: Messages } | undefined> {
	try {
		return await readsInPlace(messages, ctx, cache);
	} catch {
		return undefined; // never a throw to Pi: its messages as they are
	}
}

async function readsInPlace(
	messages: Messages,
	ctx: ExtensionContext,
	cache: Map<string, unknown>,
): Promise<{ messages: Messages } | undefined> {
	if (!messages.some(isReadReport)) return undefined;
	const paths = new Map<string, unknown>();
	for (const m of messages) {
		const { role, content } = m as { role?: unknown; content?: unknown };
		if (role !== "assistant" || !Array.isArray(content)) continue;
		for (const c of content) {
			if (c?.type === "toolCall" && typeof c.id === "string") paths.set(c.id, c.arguments?.path);
		}
	}
	const read = createReadToolDefinition(ctx.cwd);
	const out: Messages = [];
	for (const m of messages) {
		if (!isReadReport(m)) {
			out.push(m);
			continue;
		}
		let content = cache.get(m.toolCallId);
		if (content === undefined) {
			const path = paths.get(m.toolCallId);
			try {
				if (typeof path !== "string") throw new Error("its call is not in the conversation");
				// Pi's read looks at ctx.cwd and ctx.model only, which every extension context has
				const r = await read.execute(m.toolCallId, { path }, ctx.signal, undefined, ctx as ExtensionToolContext);
				content = r.content;
			} catch (e) {
				const text = `[context_os is off, and ${String(path)} cannot be read again: ${message(e)}]`;
				content = [{ type: "text", text }];
			}
			cache.set(m.toolCallId, content);
		}
		out.push({ ...m, content } as Messages[number]);
	}
	return { messages: out };
}

const ABORTED = Symbol("aborted");

/** `promise`'s value, or ABORTED as soon as `signal` aborts (the promise is left to settle alone). */
function untilAborted<T>(promise: Promise<T>, signal: AbortSignal | undefined): Promise<T | typeof ABORTED> {
	if (!signal) return promise;
	if (signal.aborted) return Promise.resolve(ABORTED);
	return new Promise((resolve, reject) => {
		const onAbort = () => resolve(ABORTED);
		signal.addEventListener("abort", onAbort, { once: true });
		promise.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
	});
}

/** Why `messages` cannot go to Pi, or undefined when it can. */
function unusable(messages: unknown): string | undefined {
	if (!Array.isArray(messages)) return "not a list";
	if (messages.length === 0) return "empty";
	const bad = messages.findIndex(
		(m) => typeof m !== "object" || m === null || typeof (m as { role?: unknown }).role !== "string",
	);
	return bad >= 0 ? `message ${bad} has no role` : undefined;
}

/** What `mesh.status` says of the peers the mesh node could not dial at start, one line each. */
function bootstrapFailures(status: unknown): string[] {
	const failed = (status as { bootstrapFailed?: unknown } | null)?.bootstrapFailed;
	if (!Array.isArray(failed)) return [];
	return failed.map((f: { address?: unknown; error?: unknown } | null) => {
		return `context_os: mesh: could not connect to ${String(f?.address)} at start (${String(f?.error)}); CTXOS_MESH_ARGS names it`;
	});
}

function toolNames(tools: unknown): string[] {
	if (!Array.isArray(tools)) return [];
	return tools.flatMap((t) => {
		// neutral ({name}) or OpenAI-style ({function: {name}}) definitions
		const entry = t as { name?: unknown; function?: { name?: unknown } } | null;
		const name = entry?.name ?? entry?.function?.name;
		return typeof name === "string" ? [name] : [];
	});
}

function describe(e: unknown): string {
	return e instanceof RpcError ? `${e.message} (JSON-RPC error ${e.code})` : message(e);
}

function message(e: unknown): string {
	return e instanceof Error ? e.message : String(e);
}

/** A JSON object from an environment variable (undefined when unset). */
function jsonObject(value: string | undefined): object | undefined {
	if (!value?.trim()) return undefined;
	const parsed: unknown = JSON.parse(value);
	if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) throw new Error("not a JSON object");
	return parsed;
}

/** CTXOS_TIMEOUT_MS, a whole number of milliseconds; the default (and a problem said) for anything else. */
function timeoutSetting(): number {
	const value = process.env.CTXOS_TIMEOUT_MS?.trim();
	if (!value) return DEFAULT_TIMEOUT_MS;
	const n = Number(value);
	if (/^\d+$/.test(value) && n > MAX_TIMEOUT_MS) {
		// Node's timers fire at once past 2^31-1 ms: every call timed out, and context_os went off
		CONFIG_PROBLEMS.push(`CTXOS_TIMEOUT_MS=${quoted(value)} is over ${MAX_TIMEOUT_MS} ms (about 24.8 days), the longest Node waits: using ${MAX_TIMEOUT_MS}`);
		return MAX_TIMEOUT_MS;
	}
	if (/^\d+$/.test(value) && Number.isSafeInteger(n) && n > 0) return n;
	CONFIG_PROBLEMS.push(`CTXOS_TIMEOUT_MS=${quoted(value)} is not a whole number of milliseconds: using ${DEFAULT_TIMEOUT_MS}`);
	return DEFAULT_TIMEOUT_MS;
}

/** An on/off setting (1/true/yes/on, 0/false/no/off, any case); anything else is off, and said. */
function flag(name: string, tool: string): boolean {
	const value = (process.env[name] ?? "").trim();
	if (ON.includes(value.toLowerCase())) return true;
	if (!OFF.includes(value.toLowerCase())) {
		CONFIG_PROBLEMS.push(`${name}=${quoted(value)} is neither 1 (on) nor 0 (off): ${tool} stays off`);
	}
	return false;
}

function quoted(value: string): string {
	return `'${value}'`;
}

/** A warning notification in the TUI (and over RPC); a stderr line where there is no UI (print, JSON). */
function warn(ctx: ExtensionContext, text: string): void {
	if (ctx.hasUI) ctx.ui.notify(text, "warning");
	else process.stderr.write(`${text}\n`);
}
