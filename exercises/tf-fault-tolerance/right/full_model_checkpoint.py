import json
import os

import keras


class Progress(keras.callbacks.Callback):
    """Write the number of completed epochs next to the model saved by ModelCheckpoint."""

    def __init__(self, path):
        super().__init__()
        self.path = path

    def on_epoch_end(self, epoch, logs=None):
        with open(self.path, "w") as f:
            json.dump({"done": epoch + 1}, f)


def train(strategy, build_and_compile, dataset, epochs, backup_dir, callbacks):
    os.makedirs(backup_dir, exist_ok=True)
    saved, progress = os.path.join(backup_dir, "last.keras"), os.path.join(backup_dir, "progress.json")
    initial_epoch = 0
    with strategy.scope():
        if os.path.exists(progress):
            # A .keras file holds the compiled model with its optimizer state, so momentum carries on.
            model = keras.models.load_model(saved)
            with open(progress) as f:
                initial_epoch = json.load(f)["done"]
        else:
            model = build_and_compile()
    save = keras.callbacks.ModelCheckpoint(saved)  # the whole model, not save_weights_only
    model.fit(dataset, epochs=epochs, initial_epoch=initial_epoch, callbacks=[save, Progress(progress), *callbacks],
              verbose=0)
    return model
