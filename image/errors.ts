// Errors the image builder throws. Messages are lowercase and name what is
// wrong first ("could not resolve kernel package: ..."), causes ride along.

/** A build step could not produce its output. */
export class ImageBuildError extends Error {
  override name = "ImageBuildError";
}
