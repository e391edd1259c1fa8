import json
import os
import shutil

import keras  # noqa: F401 - keras.callbacks holds the tool


class _EpochCheckpoint(keras.callbacks.Callback):
    """Own backup: weights + optimizer variables + number of completed epochs, written at each epoch end."""

    def __init__(self, backup_dir):
        super().__init__()
        self.backup_dir = backup_dir
        self.weights_path = os.path.join(backup_dir, "state.weights.h5")
        self.meta_path = os.path.join(backup_dir, "state.json")

    def on_epoch_end(self, epoch, logs=None):
        os.makedirs(self.backup_dir, exist_ok=True)
        # model.save_weights also writes the optimizer's variables
        self.model.save_weights(self.weights_path, overwrite=True)
        tmp = self.meta_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"epochs_done": epoch + 1}, f)
        os.replace(tmp, self.meta_path)


def train(strategy, build_and_compile, dataset, epochs, backup_dir, callbacks):
    """Build and compile the model under `strategy` (call build_and_compile()), fit it on `dataset` for
    `epochs` epochs with `callbacks`, and return it. A run that is killed part-way and started again with the
    same backup_dir must continue from the last completed epoch, with the optimizer's state."""
    saver = _EpochCheckpoint(backup_dir)
    initial_epoch = 0
    with strategy.scope():
        model = build_and_compile()
        if os.path.exists(saver.meta_path) and os.path.exists(saver.weights_path):
            # Build the optimizer's own variables first, so that load_weights restores momentum
            # and the step counter instead of skipping them.
            model.optimizer.build(model.trainable_variables)
            model.load_weights(saver.weights_path)
            with open(saver.meta_path) as f:
                initial_epoch = int(json.load(f)["epochs_done"])
    model.fit(
        dataset,
        epochs=epochs,
        initial_epoch=initial_epoch,
        callbacks=[saver] + list(callbacks),
        verbose=0,
    )
    # Finished normally: the backup is no longer needed.
    shutil.rmtree(backup_dir, ignore_errors=True)
    return model
