// Errors the image builder throws. Messages are lowercase and name what is
// wrong first ("could not resolve kernel package: ..."), causes ride along.

/** A build step could not produce its output. */
export class ImageBuildError extends Error {
  override name = "ImageBuildError";
}

/** A host command exited unsuccessfully; the message carries its stderr tail. */
export class CommandError extends Error {
  override name = "CommandError";
  constructor(
    message: string,
    readonly argv: readonly string[],
    readonly exitCode: number | null,
    readonly stderr: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}
