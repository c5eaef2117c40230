/**
 * A JSON-RPC 2.0 client for one `ctxos serve --stdio` child process: one request per line on its
 * stdin, one answer per line on its stdout (docs/protocol.md).
 *
 * Every failure surfaces as a rejected call, never as an exception thrown elsewhere: a child that
 * cannot start, exits, writes something that is not an answer, or does not answer in time rejects
 * every pending call with `ChildGone`; an answer with an `error` member rejects that call with
 * `RpcError`; a call whose signal aborts rejects at once with `CallAborted`, and its answer, if one
 * comes, is dropped. The caller decides what a failure means (the extension fails open). A child
 * that exits on its own, a call pending or not, is also reported to `onExit`.
 *
 * The child's stderr is kept (its last lines) for error messages and never written to the
 * terminal: in Pi's TUI it would draw over the screen.
 */

import { type ChildProcessWithoutNullStreams, spawn } from "node:child_process";
import { createInterface } from "node:readline";

/** The child is unusable: it did not start, it exited, it broke the protocol or it timed out. */
export class ChildGone extends Error {}

/** The caller gave the call up (its signal aborted): not a failure of the child. */
export class CallAborted extends Error {}

/** The server answered with a JSON-RPC error. */
export class RpcError extends Error {
	constructor(
		readonly code: number,
		message: string,
		readonly data: unknown,
	) {
		super(message);
	}
}

interface Pending {
	method: string;
	resolve: (value: unknown) => void;
	reject: (error: Error) => void;
	timer: NodeJS.Timeout;
}

const STDERR_KEEP = 4000;
const EXIT_GRACE_MS = 200;
/** How long a child has to exit after SIGTERM before it gets SIGKILL. */
const KILL_AFTER_MS = 2000;
/** The longest a Node timer can wait (a longer one fires at once). */
export const MAX_TIMEOUT_MS = 2 ** 31 - 1;

/** Splits a command line into words, honouring single and double quotes and backslashes. */
export function splitCommand(line: string): string[] {
	const words: string[] = [];
	let word = "";
	let inWord = false;
	let quote: string | null = null;
	for (let i = 0; i < line.length; i++) {
		const c = line[i];
		if (quote) {
			if (c === quote) quote = null;
			else if (c === "\\" && quote === '"' && i + 1 < line.length) word += line[++i];
			else word += c;
		} else if (c === "'" || c === '"') {
			quote = c;
			inWord = true;
		} else if (c === "\\" && i + 1 < line.length) {
			word += line[++i];
			inWord = true;
		} else if (/\s/.test(c)) {
			if (inWord) words.push(word);
			word = "";
			inWord = false;
		} else {
			word += c;
			inWord = true;
		}
	}
	if (quote) throw new Error(`unbalanced ${quote} in command ${JSON.stringify(line)}`);
	if (inWord) words.push(word);
	return words;
}

export class RpcChild {
	private child: ChildProcessWithoutNullStreams | undefined;
	private pending = new Map<number, Pending>();
	private nextId = 1;
	/** Ids of calls given up (`CallAborted`) whose answers have not come yet: dropped when they do. */
	private abandoned = new Set<number>();
	private stderr = "";
	private gone: ChildGone | undefined;
	/** The child's end under way (SIGTERM, then SIGKILL), once. */
	private killing: Promise<void> | undefined;

	/** Spawns `argv` at once; a failure to start shows up as the first call's rejection.
	 * `onExit`: told once when the child exits (or cannot run) before `close()`, with the reason. */
	constructor(
		argv: string[],
		private readonly timeoutMs: number,
		options: { cwd?: string; env?: NodeJS.ProcessEnv; onExit?: (reason: ChildGone) => void } = {},
	) {
		try {
			// its own process group, so that ending it also ends whatever a wrapper command started
			const detached = process.platform !== "win32";
			this.child = spawn(argv[0], argv.slice(1), { cwd: options.cwd, env: options.env, stdio: "pipe", detached });
		} catch (e) {
			this.fail(`could not start ${JSON.stringify(argv.join(" "))}: ${message(e)}`);
			return;
		}
		const child = this.child;
		child.on("error", (e) => this.fail(`could not run ${JSON.stringify(argv.join(" "))}: ${spawnError(argv[0], e)}`));
		// the reason names the exit, and for an exit with an error code the child's last stderr line
		// (what it said of the error; a child killed or exiting 0 said nothing of why, and its last
		// line is whatever it logged before): "close" comes once stderr is read to its end; "exit"
		// (plus a moment for stderr) covers a grandchild holding the pipes
		const exited = (code: number | null, signal: NodeJS.Signals | null) => {
			const first = this.gone === undefined;
			const how = signal ? `was killed by ${signal}` : `exited with code ${code}`;
			const last = !signal && code !== 0 ? this.stderrTail() : "";
			this.fail(`ctxos ${how}${last ? `: ${last}` : ""}`);
			if (first && this.gone) options.onExit?.(this.gone);
		};
		child.on("close", exited);
		child.on("exit", (code, signal) => setTimeout(() => exited(code, signal), EXIT_GRACE_MS).unref());
		// a child that exits at once breaks the pipe before its exit is reported: give the exit (and
		// its stderr) a moment to be the reason given
		child.stdin.on("error", (e) => {
			setTimeout(() => this.fail(`cannot write to ctxos: ${e.message}`), EXIT_GRACE_MS).unref();
		});
		child.stderr.setEncoding("utf8");
		child.stderr.on("data", (chunk: string) => {
			this.stderr = (this.stderr + chunk).slice(-STDERR_KEEP);
		});
		const lines = createInterface({ input: child.stdout, crlfDelay: Infinity });
		lines.on("line", (line) => this.onLine(line));
		this.idle();
	}

	/** The last non-empty line the child wrote to stderr (for error messages). */
	stderrTail(): string {
		const lines = this.stderr.trim().split("\n");
		return lines[lines.length - 1]?.trim() ?? "";
	}

	/** Calls `method`; resolves with the answer's `result`. With `signal`, the call is given up when
	 * it aborts: rejected at once with `CallAborted` (not sent at all if it already has), its answer
	 * dropped when it comes, the child still in use. */
	call<T>(method: string, params: object, options: { timeoutMs?: number; signal?: AbortSignal } = {}): Promise<T> {
		if (this.gone) return Promise.reject(this.gone);
		const { timeoutMs = this.timeoutMs, signal } = options;
		if (signal?.aborted) return Promise.reject(new CallAborted(`${method} was aborted`));
		const child = this.child as ChildProcessWithoutNullStreams;
		const id = this.nextId++;
		// JSON text must be UTF-8, which has no lone surrogate (a cut emoji, a pasted fragment):
		// ctxos refused the whole request, and context_os went off for the session
		const line = `${JSON.stringify({ jsonrpc: "2.0", id, method, params }, wellFormed)}\n`;
		return new Promise<T>((resolve, reject) => {
			const timer = setTimeout(() => {
				this.fail(`ctxos did not answer ${method} within ${timeoutMs} ms`);
			}, timeoutMs);
			const onAbort = () => {
				if (!this.pending.delete(id)) return;
				clearTimeout(timer);
				this.abandoned.add(id);
				if (this.pending.size === 0) this.idle();
				reject(new CallAborted(`${method} was aborted`));
			};
			const settle =
				<A>(settled: (a: A) => void) =>
				(a: A) => {
					signal?.removeEventListener("abort", onAbort);
					settled(a);
				};
			this.pending.set(id, { method, resolve: settle(resolve as (v: unknown) => void), reject: settle(reject), timer });
			signal?.addEventListener("abort", onAbort, { once: true });
			this.busy();
			child.stdin.write(line);
		});
	}

	/** Ends the child: closes its stdin (it exits at end of input); if it is still there after
	 * `graceMs`, SIGTERM, and SIGKILL 2 s later. Resolves when it is gone (the caller may wait for
	 * that before its own process exits: a timer left behind dies with it). */
	close(graceMs = 2000): Promise<void> {
		const child = this.child;
		this.fail("context_os was closed", { kill: false });
		if (!child || hasExited(child)) return Promise.resolve();
		child.stdin.end();
		const gone = exitWithin(child, graceMs).then((exited) => (exited ? undefined : this.terminate()));
		// Pi exits once its shutdown handlers are done: held until then, with timers that did not
		// hold it, a child that ignores its stdin and SIGTERM (hung) outlived Pi
		const hold = setInterval(() => {}, 1000);
		return gone.finally(() => clearInterval(hold));
	}

	private onLine(line: string): void {
		if (!line.trim()) return;
		let answer: { id?: unknown; result?: unknown; error?: { code?: unknown; message?: unknown; data?: unknown } };
		try {
			answer = JSON.parse(line);
		} catch {
			this.fail(`ctxos wrote something that is not JSON-RPC: ${line.slice(0, 200)}`);
			return;
		}
		if (typeof answer.id === "number" && this.abandoned.delete(answer.id)) return; // its caller gave it up
		const pending = typeof answer.id === "number" ? this.pending.get(answer.id) : undefined;
		if (!pending) {
			// an answer without an id (e.g. a parse error) cannot be matched to a call: the stream
			// can no longer be trusted
			const why = answer.error?.message ?? "no matching request";
			this.fail(`ctxos answered a request it was not asked (${String(why)})`);
			return;
		}
		this.pending.delete(answer.id as number);
		clearTimeout(pending.timer);
		if (this.pending.size === 0) this.idle();
		if (answer.error) {
			const e = answer.error;
			pending.reject(new RpcError(Number(e.code), String(e.message ?? "error"), e.data));
		} else {
			pending.resolve(answer.result);
		}
	}

	/** Marks the child unusable (once), rejects everything pending and (unless told not to) ends it. */
	private fail(reason: string, { kill = true } = {}): void {
		if (!this.gone) this.gone = new ChildGone(reason);
		for (const p of this.pending.values()) {
			clearTimeout(p.timer);
			p.reject(this.gone);
		}
		this.pending.clear();
		this.abandoned.clear();
		if (kill) void this.terminate();
		this.idle();
	}

	/** SIGTERM to the child's process group, SIGKILL 2 s later if it is still there (once); resolves
	 * when it is gone. Its timers do not keep this process alive (`close` holds it). */
	private terminate(): Promise<void> {
		const child = this.child;
		if (!child || hasExited(child)) return Promise.resolve();
		this.killing ??= (async () => {
			signalGroup(child, "SIGTERM");
			if (await exitWithin(child, KILL_AFTER_MS)) return;
			signalGroup(child, "SIGKILL");
			await exitWithin(child, KILL_AFTER_MS);
		})();
		return this.killing;
	}

	// While no call is pending the child must not keep Pi's process alive (print mode exits when
	// its prompts are done); while one is, it must.
	private busy(): void {
		this.child?.ref();
		setRef(this.child?.stdout, true);
	}

	private idle(): void {
		const child = this.child;
		if (!child) return;
		child.unref();
		for (const stream of [child.stdin, child.stdout, child.stderr]) setRef(stream, false);
	}
}

/** `signal` to the child's process group (see the constructor), else to the child alone. */
function signalGroup(child: ChildProcessWithoutNullStreams, signal: NodeJS.Signals): void {
	try {
		if (child.pid !== undefined && process.platform !== "win32") process.kill(-child.pid, signal);
		else child.kill(signal);
	} catch {
		child.kill(signal);
	}
}

function hasExited(child: ChildProcessWithoutNullStreams): boolean {
	return child.exitCode !== null || child.signalCode !== null;
}

/** Whether the child exits within `ms` (the wait does not keep this process alive). */
function exitWithin(child: ChildProcessWithoutNullStreams, ms: number): Promise<boolean> {
	if (hasExited(child)) return Promise.resolve(true);
	return new Promise((resolve) => {
		const timer = setTimeout(() => {
			child.off("exit", onExit);
			resolve(hasExited(child));
		}, ms);
		timer.unref();
		const onExit = () => {
			clearTimeout(timer);
			resolve(true);
		};
		child.once("exit", onExit);
	});
}

/** A string as it can go into UTF-8: each lone surrogate becomes U+FFFD (JSON.stringify replacer). */
function wellFormed(_key: string, value: unknown): unknown {
	if (typeof value !== "string") return value;
	const s = value as string & { toWellFormed?: () => string };
	return s.toWellFormed ? s.toWellFormed() : s.replace(LONE_SURROGATE, "\uFFFD");
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/** Pipes to a child are sockets, which can be (un)referenced; the stream types do not say so. */
function setRef(stream: object | undefined, on: boolean): void {
	const s = stream as { ref?: () => void; unref?: () => void } | undefined;
	if (on) s?.ref?.();
	else s?.unref?.();
}

function message(e: unknown): string {
	return e instanceof Error ? e.message : String(e);
}

/** Why a command did not run; for one that is not there, what to do about it. */
function spawnError(command: string, e: NodeJS.ErrnoException): string {
	if (e.code !== "ENOENT") return e.message;
	const where = command.includes("/") ? "does not exist" : "is not on PATH";
	return `${command} ${where}: set CTXOS_CMD to the ctxos to run (e.g. /path/to/context_os/.venv/bin/ctxos)`;
}
