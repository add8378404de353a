// The DHCP client's UDP socket: 0.0.0.0:68, bound to one interface.
//
// SO_BINDTODEVICE is what lets a plain UDP socket do DHCP: Linux sends a
// limited broadcast (255.255.255.255) out of the bound device without any
// route, and delivers broadcast replies to it before the interface has an
// address. Receiving never blocks the event loop: recvfrom with MSG_DONTWAIT,
// and a short abortable sleep while nothing has arrived.

import { sleep } from "../supervisor/mod.ts";
import * as sys from "../sys/mod.ts";
import { DHCP_CLIENT_PORT } from "./dhcp_message.ts";
import { ANY_ADDRESS, SOCKADDR_IN_SIZE, formatIPv4, sockaddrIn } from "./ipv4.ts";

export class DhcpSocketError extends Error {
  override name = "DhcpSocketError";
}

/** How often a waiting receive looks for a datagram. */
export const RECEIVE_POLL_INTERVAL_MS = 20;
/** Larger than any DHCP message a server sends over Ethernet. */
const RECEIVE_BUFFER_SIZE = 2048;

export interface Destination {
  address: string;
  port: number;
}

export interface Datagram {
  data: Uint8Array;
  /** The sender's address. */
  from: string;
}

/** What the DHCP client sends and receives through; DhcpSocket on a node, a fake in tests. */
export interface DhcpTransport {
  /** Sends one datagram; returns false if the kernel had no room for it (a lost packet). */
  send(data: Uint8Array, to: Destination): boolean;
  /**
   * The next datagram, or undefined once `deadline` (a performance.now()
   * time) passes without one. Rejects with the signal's reason on abort.
   */
  receive(deadline: number, signal: AbortSignal): Promise<Datagram | undefined>;
}

export class DhcpSocket implements DhcpTransport, Disposable {
  private readonly buffer = new Uint8Array(RECEIVE_BUFFER_SIZE);
  private readonly fromAddress = new Uint8Array(SOCKADDR_IN_SIZE);
  private readonly fromLength = new Uint32Array(1);
  private closed = false;

  private constructor(
    private readonly fd: number,
    readonly interfaceName: string,
  ) {}

  /** Opens the socket on `interfaceName`, bound to 0.0.0.0:68. */
  static open(interfaceName: string): DhcpSocket {
    let fd: number | undefined;
    try {
      fd = sys.socket(sys.AF_INET, sys.SOCK_DGRAM | sys.SOCK_CLOEXEC, 0);
      const on = new Uint8Array(new Int32Array([1]).buffer);
      sys.setsockopt(fd, sys.SOL_SOCKET, sys.SO_REUSEADDR, on, "SO_REUSEADDR");
      sys.setsockopt(fd, sys.SOL_SOCKET, sys.SO_BROADCAST, on, "SO_BROADCAST");
      sys.setsockopt(fd, sys.SOL_SOCKET, sys.SO_BINDTODEVICE, sys.cString(interfaceName), "SO_BINDTODEVICE");
      sys.bind(fd, sockaddrIn(ANY_ADDRESS, DHCP_CLIENT_PORT));
      return new DhcpSocket(fd, interfaceName);
    } catch (err) {
      if (fd !== undefined) sys.close(fd);
      throw new DhcpSocketError(`could not open DHCP socket on ${interfaceName}: ${(err as Error).message}`, { cause: err });
    }
  }

  send(data: Uint8Array, to: Destination): boolean {
    this.assertOpen();
    const { result, errno } = sys.sendto(this.fd, data, sys.MSG_DONTWAIT, sockaddrIn(to.address, to.port));
    if (result >= 0) return true;
    // A full send buffer is a lost packet; DHCP retransmits.
    if (errno === sys.EAGAIN || errno === sys.ENOBUFS) return false;
    const cause = new sys.SyscallError("sendto", errno);
    throw new DhcpSocketError(`could not send DHCP message to ${to.address}:${to.port} on ${this.interfaceName}: ${cause.message}`, {
      cause,
    });
  }

  async receive(deadline: number, signal: AbortSignal): Promise<Datagram | undefined> {
    for (;;) {
      signal.throwIfAborted();
      this.assertOpen();
      const datagram = this.tryReceive();
      if (datagram !== undefined) return datagram;
      const remaining = deadline - performance.now();
      if (remaining <= 0) return undefined;
      await sleep(Math.min(RECEIVE_POLL_INTERVAL_MS, remaining), signal);
    }
  }

  /** A datagram waiting in the socket, without blocking. */
  private tryReceive(): Datagram | undefined {
    for (;;) {
      this.fromLength[0] = SOCKADDR_IN_SIZE;
      const { result, errno } = sys.recvfrom(this.fd, this.buffer, sys.MSG_DONTWAIT, this.fromAddress, this.fromLength);
      if (result >= 0) {
        const from = formatIPv4(new DataView(this.fromAddress.buffer).getUint32(4));
        return { data: this.buffer.slice(0, result), from };
      }
      if (errno === sys.EINTR) continue;
      if (errno === sys.EAGAIN) return undefined;
      const cause = new sys.SyscallError("recvfrom", errno);
      throw new DhcpSocketError(`could not receive DHCP message on ${this.interfaceName}: ${cause.message}`, { cause });
    }
  }

  private assertOpen(): void {
    if (this.closed) throw new DhcpSocketError(`DHCP socket on ${this.interfaceName} is closed`);
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    sys.close(this.fd);
  }

  [Symbol.dispose](): void {
    this.close();
  }
}
