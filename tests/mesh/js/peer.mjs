// A js-libp2p 3 peer speaking the seed's mesh protocols, driven by JSON lines on stdin, for the
// interop tests (tests/mesh/test_js_interop.py). It prints JSON lines on stdout:
//   {"ready": {peerId, addrs}} once listening;  {"broadcast": {...}} for each broadcast it receives;
//   {"request": {...}} for each direct request it receives (it answers "[js] Received: <message>");
//   one answer line per command: {"ok": ...} or {"error": "..."}.
// Commands: {"dial": maddr}, {"send": {"peer": id, "message": text}}, {"publish": text},
//   {"subscribers": true}, {"connected": true}, {"addrs": true}; with --dht: {"provide": hexMultihash},
//   {"providers": hexMultihash}. It stops when stdin closes.
// usage: node peer.mjs [--seed HEX32] [--psk HEX32] [--ws] [--dht] [--relay-service] [--relay MADDR]
//   --ws: listen on a WebSocket address too (it dials WebSocket addresses either way);
//   --dht: run a Kademlia DHT server (@libp2p/kad-dht) on /ipfs/kad/1.0.0, py-libp2p's protocol;
//   --relay-service: relay for others (circuit relay v2, no limit on relayed connections);
//   --relay MADDR: reserve a slot on that relay (it dials /p2p-circuit addresses either way)
import { createInterface } from "node:readline"
import { noise } from "@chainsafe/libp2p-noise"
import { yamux } from "@chainsafe/libp2p-yamux"
import { generateKeyPair, generateKeyPairFromSeed } from "@libp2p/crypto/keys"
import { circuitRelayServer, circuitRelayTransport } from "@libp2p/circuit-relay-v2"
import { gossipsub } from "@libp2p/gossipsub"
import { identify } from "@libp2p/identify"
import { kadDHT } from "@libp2p/kad-dht"
import { ping } from "@libp2p/ping"
import { preSharedKey } from "@libp2p/pnet"
import { tcp } from "@libp2p/tcp"
import { webSockets } from "@libp2p/websockets"
import { lpStream } from "@libp2p/utils"
import { multiaddr } from "@multiformats/multiaddr"
import { decode, encode } from "cborg"
import { createLibp2p } from "libp2p"
import { CID } from "multiformats/cid"
import * as Digest from "multiformats/hashes/digest"

const PROTOCOL = "/pi-agent/0.1.0"
const TOPIC = "pi-broadcast"
const args = process.argv.slice(2)
const option = (name) => {
	const i = args.indexOf(name)
	return i >= 0 ? args[i + 1] : undefined
}
const say = (value) => process.stdout.write(`${JSON.stringify(value)}\n`)

const seed = option("--seed")
const config = {
	privateKey: seed ? await generateKeyPairFromSeed("Ed25519", Buffer.from(seed, "hex")) : await generateKeyPair("Ed25519"),
	addresses: {
		listen: [
			"/ip4/127.0.0.1/tcp/0",
			...(args.includes("--ws") ? ["/ip4/127.0.0.1/tcp/0/ws"] : []),
			...(option("--relay") ? [`${option("--relay")}/p2p-circuit`] : []),
		],
	},
	transports: [tcp(), webSockets(), circuitRelayTransport()],
	connectionEncrypters: [noise()],
	streamMuxers: [yamux()],
	services: { identify: identify(), pubsub: gossipsub({ emitSelf: false, allowPublishToZeroTopicPeers: true }) },
}
if (args.includes("--dht")) {
	config.services.ping = ping()
	// the tests run on 127.0.0.1: its addresses are kept (the default mapper drops private ones)
	config.services.dht = kadDHT({ protocol: "/ipfs/kad/1.0.0", clientMode: false, peerInfoMapper: (info) => info })
}
if (args.includes("--relay-service")) config.services.relay = circuitRelayServer({ reservations: { applyDefaultLimit: false } })
const psk = option("--psk")
if (psk) config.connectionProtector = preSharedKey({ psk: new TextEncoder().encode(`/key/swarm/psk/1.0.0/\n/base16/\n${psk}`) })
const node = await createLibp2p(config)
const me = node.peerId.toString()

await node.handle(PROTOCOL, async (stream) => {
	const lp = lpStream(stream)
	const request = decode((await lp.read()).subarray())
	say({ request })
	await lp.write(
		encode({ requestId: request.requestId ?? null, fromAgent: "js", fromPeerId: me, timestamp: Date.now(), message: `[js] Received: ${request.message}`, error: false }),
	)
	await stream.close()
}, { runOnLimitedConnection: true })
node.services.pubsub.subscribe(TOPIC)
node.services.pubsub.addEventListener("message", (event) => {
	if (event.detail.topic === TOPIC) say({ broadcast: decode(event.detail.data) })
})

async function run(command) {
	if (command.dial) {
		const connection = await node.dial(multiaddr(command.dial), { signal: AbortSignal.timeout(5000) })
		return { peer: connection.remotePeer.toString() }
	}
	if (command.send) {
		const peer = node.getConnections().find((c) => c.remotePeer.toString() === command.send.peer)?.remotePeer
		if (!peer) throw new Error(`not connected to ${command.send.peer}`)
		const stream = await node.dialProtocol(peer, PROTOCOL, { signal: AbortSignal.timeout(10000), runOnLimitedConnection: true })
		const lp = lpStream(stream)
		await lp.write(
			encode({ protocol: PROTOCOL, requestId: `js-${Date.now()}`, fromAgent: "js", fromPeerId: me, timestamp: Date.now(), message: command.send.message }),
		)
		const response = decode((await lp.read({ signal: AbortSignal.timeout(10000) })).subarray())
		await stream.close()
		return { response }
	}
	if (command.publish !== undefined) {
		const body = encode({ fromAgent: "js", fromPeerId: me, type: "announce", message: command.publish, timestamp: Date.now() })
		const result = await node.services.pubsub.publish(TOPIC, body)
		return { recipients: result.recipients.map(String) }
	}
	if (command.subscribers) return { subscribers: node.services.pubsub.getSubscribers(TOPIC).map(String) }
	if (command.connected) return { peers: node.getPeers().map(String) }
	if (command.addrs) return { addrs: node.getMultiaddrs().map(String) }
	// a hex multihash (sha2-256) as the CIDv1 (raw) whose key it is, as py-libp2p's DHT takes it
	const cid = (hex) => CID.createV1(0x55, Digest.decode(Buffer.from(hex, "hex")))
	if (command.provide) {
		await node.contentRouting.provide(cid(command.provide), { signal: AbortSignal.timeout(10000) })
		return { provided: true }
	}
	if (command.providers) {
		const found = []
		for await (const p of node.contentRouting.findProviders(cid(command.providers), { signal: AbortSignal.timeout(10000) })) {
			found.push({ peer: p.id.toString(), addrs: p.multiaddrs.map(String) })
		}
		return { providers: found }
	}
	throw new Error(`unknown command ${JSON.stringify(command)}`)
}

say({ ready: { peerId: me, addrs: node.getMultiaddrs().map(String) } })
for await (const line of createInterface({ input: process.stdin })) {
	if (!line.trim()) continue
	try {
		say({ ok: await run(JSON.parse(line)) })
	} catch (e) {
		say({ error: `${e.name}: ${e.message}` })
	}
}
await node.stop()
process.exit(0)
