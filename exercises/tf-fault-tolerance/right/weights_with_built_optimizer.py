import json
import os

import keras


class SaveEpoch(keras.callbacks.Callback):
    def __init__(self, path):
        super().__init__()
        self.path = path

    def on_epoch_end(self, epoch, logs=None):
        with open(self.path, "w") as f:
            json.dump({"done": epoch + 1}, f)


def train(strategy, build_and_compile, dataset, epochs, backup_dir, callbacks):
    os.makedirs(backup_dir, exist_ok=True)
    weights, progress = os.path.join(backup_dir, "last.weights.h5"), os.path.join(backup_dir, "epoch.json")
    with strategy.scope():
        model = build_and_compile()
        # Build the optimizer's variables now, so that load_weights has somewhere to put the saved momentum.
        model.optimizer.build(model.trainable_variables)
    initial_epoch = 0
    if os.path.exists(progress):
        model.load_weights(weights)
        with open(progress) as f:
            initial_epoch = json.load(f)["done"]
    save = keras.callbacks.ModelCheckpoint(weights, save_weights_only=True)
    model.fit(dataset, epochs=epochs, initial_epoch=initial_epoch, callbacks=[save, SaveEpoch(progress), *callbacks],
              verbose=0)
    return model
