// Test driver, run by dial_from.test.ts in a process of its own (the
// change dialFromOwnAddress makes lasts for the process): a grpc-js server
// on 127.0.0.1 answers each call with the peer it saw; a grpc-js client
// calls it once before dialFromOwnAddress(argv[2]) and once after, each
// over a connection of its own. Prints {"before": peer, "after": peer}.
//
//   bun dial_from_driver.ts 127.0.0.23

import * as grpc from "@grpc/grpc-js";
import { dialFromOwnAddress } from "./dial_from.ts";

const same = (b: Buffer) => b;
const method = { path: "/test.Peer/Who", requestStream: false, responseStream: false, requestSerialize: same, requestDeserialize: same, responseSerialize: same, responseDeserialize: same } as const;
const server = new grpc.Server();
server.addService({ who: method }, { who: (call: grpc.ServerUnaryCall<Buffer, Buffer>, done: grpc.sendUnaryData<Buffer>) => done(null, Buffer.from(call.getPeer())) });
const port = await new Promise<number>((resolve, reject) => server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))));

async function peerSeen(): Promise<string> {
  const client = new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure(), { "grpc.use_local_subchannel_pool": 1 });
  try {
    const answer = await new Promise<Buffer>((resolve, reject) => client.makeUnaryRequest(method.path, same, same, Buffer.alloc(0), (err, value) => (err ? reject(err) : resolve(value!))));
    return answer.toString().replace(/:\d+$/, "");
  } finally {
    client.close();
  }
}

const before = await peerSeen();
dialFromOwnAddress(process.argv[2]!);
const after = await peerSeen();
console.log(JSON.stringify({ before, after }));
server.forceShutdown();
