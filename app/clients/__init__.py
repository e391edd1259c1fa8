"""Programs gpulab serves to learners to run on their own machines; each is one file that imports only the standard
library (checked by import-linter) and nothing of gpulab, and is never imported by the server."""
